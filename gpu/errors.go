package gpu

import "errors"

// Errors of discovery and of the device choice. Callers test them with
// errors.Is; the messages of the errors that wrap them say what was
// tried and what was found.
var (
	// ErrUnavailable: this binary cannot use CUDA at all (built without
	// cgo, or the CUDA libraries are missing).
	ErrUnavailable = errors.New("gpu: CUDA is not available")
	// ErrNoDriver: NVML (libnvidia-ml, installed with the NVIDIA driver)
	// could not be loaded or initialised; the wrapping error carries
	// NVML's or the dynamic loader's reason.
	ErrNoDriver = errors.New("no NVIDIA driver")
	// ErrNoGPU: a device choice that needs a GPU (--device cuda or
	// cuda:N) where there is none, or not that many.
	ErrNoGPU = errors.New("no GPU found")
)
