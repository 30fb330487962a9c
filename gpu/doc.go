// Package gpu will hold Shoal's GPU support (see shared/GPU.md): NVML
// discovery through go-nvml (list devices, pin a worker to the GPU of its
// local rank) and a CUDA implementation of nn.Backend that loads libcuda,
// libnvrtc and libcublas with dlopen at run time, so the binary builds and
// runs on machines without CUDA. Kernels are CUDA C embedded in the binary
// and compiled by NVRTC for the device at start-up; GEMMs go to cuBLAS.
//
// Nothing lives here yet: workers run on the CPU backend of package nn.
package gpu
