// Package machine describes what this binary runs on and computes with:
// how it was built (Build, Revision), the GEMM path a worker takes
// (OpenBLAS loaded at run time, or gonum, and why), the thread settings,
// and the GPUs as NVML and CUDA report them, with the device --device auto
// gives each local rank. `shoal info` prints its Report; `shoal version`
// its Build; the harness records the Revision beside every result.
//
// Nothing here starts a goroutine or keeps state.
package machine
