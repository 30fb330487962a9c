//go:build cgo

package gpu

import (
	"fmt"
	"os"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/shoalml/shoal/internal/dl"
)

// nvmlLibrary is the soname NVML is loaded by.
const nvmlLibrary = "libnvidia-ml.so.1"

// Devices asks NVML (through go-nvml) for the driver's version and every
// GPU's name, memory, utilisation and compute capability. Without the
// library or the driver it returns an error wrapping ErrNoDriver that
// says why. It loads libnvidia-ml.so.1, or the file $SHOAL_NVML names.
func Devices() (Inventory, error) {
	path := nvmlLibrary
	if p := os.Getenv(EnvNVML); p != "" {
		path = p
	}
	return devicesFrom(path)
}

func devicesFrom(path string) (inv Inventory, err error) {
	// go-nvml reports a library it cannot open as a bare
	// ERROR_LIBRARY_NOT_FOUND; open it here first for the loader's reason,
	// and to learn which file answered.
	lib, err := dl.Open(path)
	if err != nil {
		return inv, fmt.Errorf("%w: %w", ErrNoDriver, err)
	}
	defer lib.Close()
	inv.Library = path
	if sym, err := lib.Sym("nvmlInit_v2"); err == nil {
		if p := lib.Path(sym); p != "" {
			inv.Library = p
		}
	}
	n := nvml.New(nvml.WithLibraryPath(path))
	if ret := n.Init(); ret != nvml.SUCCESS {
		return inv, fmt.Errorf("%w: %s: nvmlInit: %s", ErrNoDriver, inv.Library, nvml.ErrorString(ret))
	}
	defer func() {
		if ret := n.Shutdown(); ret != nvml.SUCCESS && err == nil {
			err = fmt.Errorf("nvmlShutdown: %s", nvml.ErrorString(ret))
		}
	}()
	call := func(what string, ret nvml.Return) error {
		if ret != nvml.SUCCESS {
			return fmt.Errorf("%s: %s: %s", inv.Library, what, nvml.ErrorString(ret))
		}
		return nil
	}
	driver, ret := n.SystemGetDriverVersion()
	if err := call("driver version", ret); err != nil {
		return inv, err
	}
	inv.Driver = driver
	if v, ret := n.SystemGetCudaDriverVersion(); ret == nvml.SUCCESS {
		inv.CUDA = cudaVersion(v)
	}
	count, ret := n.DeviceGetCount()
	if err := call("device count", ret); err != nil {
		return inv, err
	}
	for i := range count {
		g, err := gpuInfo(n, i)
		if err != nil {
			return inv, fmt.Errorf("%s: GPU %d: %w", inv.Library, i, err)
		}
		inv.GPUs = append(inv.GPUs, g)
	}
	return inv, nil
}

// gpuInfo asks NVML about GPU i. Name, UUID, memory and compute
// capability must answer; utilisation may be unsupported (-1).
func gpuInfo(n nvml.Interface, i int) (GPU, error) {
	g := GPU{Index: i, Utilization: -1}
	d, ret := n.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return g, fmt.Errorf("handle: %s", nvml.ErrorString(ret))
	}
	steps := []struct {
		what string
		get  func() nvml.Return
	}{
		{"name", func() (r nvml.Return) { g.Name, r = d.GetName(); return }},
		{"UUID", func() (r nvml.Return) { g.UUID, r = d.GetUUID(); return }},
		{"memory", func() nvml.Return {
			m, r := d.GetMemoryInfo()
			g.MemoryTotal, g.MemoryUsed = m.Total, m.Used
			return r
		}},
		{"compute capability", func() nvml.Return {
			major, minor, r := d.GetCudaComputeCapability()
			g.ComputeCapability = fmt.Sprintf("%d.%d", major, minor)
			return r
		}},
	}
	for _, s := range steps {
		if r := s.get(); r != nvml.SUCCESS {
			return g, fmt.Errorf("%s: %s", s.what, nvml.ErrorString(r))
		}
	}
	if u, r := d.GetUtilizationRates(); r == nvml.SUCCESS {
		g.Utilization = int(u.Gpu)
	}
	return g, nil
}
