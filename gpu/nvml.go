package gpu

import (
	"fmt"
	"strconv"
	"strings"
)

// EnvNVML names the NVML library to load instead of libnvidia-ml.so.1.
const EnvNVML = "SHOAL_NVML"

// Inventory is what NVML, the management library installed with the
// NVIDIA driver, reports of this machine; see Devices.
type Inventory struct {
	// Library is the libnvidia-ml that answered.
	Library string `json:"library"`
	// Driver is the driver's version, e.g. "580.65.06".
	Driver string `json:"driver"`
	// CUDA is the newest CUDA version the driver supports, e.g. "13.0".
	CUDA string `json:"cuda"`
	// GPUs are in NVML's order (PCI bus order), all of them, whatever
	// CUDA_VISIBLE_DEVICES says; see Visible.
	GPUs []GPU `json:"gpus"`
}

// GPU is one device as NVML reports it.
type GPU struct {
	// Index is NVML's index, the one nvidia-smi shows.
	Index int    `json:"index"`
	Name  string `json:"name"`
	UUID  string `json:"uuid"`
	// ComputeCapability is e.g. "9.0" for an H100.
	ComputeCapability string `json:"compute_capability"`
	MemoryTotal       uint64 `json:"memory_total_bytes"`
	MemoryUsed        uint64 `json:"memory_used_bytes"`
	// Utilization is the percentage of the last sample period in which a
	// kernel ran, or -1 where NVML cannot say (e.g. a MIG device).
	Utilization int `json:"utilization_percent"`
}

// String describes g on one line, as shoal info prints it.
func (g GPU) String() string {
	util := "utilisation unknown"
	if g.Utilization >= 0 {
		util = fmt.Sprintf("%d%% busy", g.Utilization)
	}
	return fmt.Sprintf("%s, compute capability %s, %.1f of %.1f GiB used, %s, %s",
		g.Name, g.ComputeCapability, gib(g.MemoryUsed), gib(g.MemoryTotal), util, g.UUID)
}

func gib(b uint64) float64 { return float64(b) / (1 << 30) }

// Visible returns the GPUs CUDA will see, in CUDA's ordinal order, under
// CUDA_VISIBLE_DEVICES = env (set says whether the variable is set at
// all: unset shows every GPU, set but empty none). Entries are NVML
// indices or UUIDs, or UUID prefixes of at least "GPU-" and one more
// character, as CUDA accepts them; like CUDA, Visible ignores an invalid
// entry and everything after it, and says so in note. A MIG entry is
// reported in note, not resolved.
func (inv Inventory) Visible(env string, set bool) (gpus []GPU, note string) {
	if !set {
		return inv.GPUs, ""
	}
	seen := map[int]bool{}
	for i, e := range strings.Split(env, ",") {
		e = strings.TrimSpace(e)
		if e == "" && i == 0 {
			break
		}
		g, why := inv.match(e)
		if why == "" && seen[g.Index] {
			return gpus, fmt.Sprintf("CUDA_VISIBLE_DEVICES=%q names GPU %d twice; CUDA may refuse the list", env, g.Index)
		}
		if why != "" {
			return gpus, fmt.Sprintf("CUDA_VISIBLE_DEVICES=%q: entry %q %s; CUDA ignores it and the entries after it", env, e, why)
		}
		seen[g.Index] = true
		gpus = append(gpus, g)
	}
	return gpus, ""
}

// match finds the GPU an entry of CUDA_VISIBLE_DEVICES names, or says why
// none.
func (inv Inventory) match(e string) (GPU, string) {
	if n, err := strconv.Atoi(e); err == nil {
		for _, g := range inv.GPUs {
			if g.Index == n {
				return g, ""
			}
		}
		return GPU{}, fmt.Sprintf("is not a GPU index here (%d GPU(s))", len(inv.GPUs))
	}
	if strings.HasPrefix(e, "MIG-") {
		return GPU{}, "is a MIG instance, which Shoal does not map to a GPU"
	}
	if !strings.HasPrefix(e, "GPU-") || len(e) == len("GPU-") {
		return GPU{}, "is neither an index nor a GPU UUID"
	}
	var found []GPU
	for _, g := range inv.GPUs {
		if strings.HasPrefix(g.UUID, e) {
			found = append(found, g)
		}
	}
	switch len(found) {
	case 1:
		return found[0], ""
	case 0:
		return GPU{}, "matches no GPU's UUID"
	}
	return GPU{}, fmt.Sprintf("matches %d GPUs' UUIDs", len(found))
}

// cudaVersion spells NVML's CUDA version (1000*major + 10*minor).
func cudaVersion(v int) string { return fmt.Sprintf("%d.%d", v/1000, v%1000/10) }
