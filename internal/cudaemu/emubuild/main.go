// Command emubuild builds the CUDA emulator (package cudaemu) for Shoal's
// kernels into a folder, for scripts that run the real binaries on it
// (make gpu-check-emu): point them at it with SHOAL_LIBCUDA=DIR/libcuda.so.1
// and SHOAL_CUDA_LIB_DIR=DIR.
//
//	go run ./internal/cudaemu/emubuild DIR
package main

import (
	"fmt"
	"os"

	"github.com/shoalml/shoal/gpu"
	"github.com/shoalml/shoal/internal/cudaemu"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: emubuild DIR")
		os.Exit(2)
	}
	dir := os.Args[1]
	err := os.MkdirAll(dir, 0o755)
	if err == nil {
		err = cudaemu.Build(dir, gpu.KernelSource())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "emubuild:", err)
		os.Exit(1)
	}
}
