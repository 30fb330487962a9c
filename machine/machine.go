package machine

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/shoalml/shoal/gpu"
	"github.com/shoalml/shoal/nn"
)

// Build is what the binary knows of how it was built.
type Build struct {
	Version, Revision string // "(devel)", "unknown" when not stamped
	Modified          bool   // built from a tree with uncommitted changes
	Cgo               bool   // built with CGO_ENABLED=1
}

// ReadBuild reads this binary's build information.
func ReadBuild() Build {
	b := Build{Version: "(devel)", Revision: "unknown"}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	if bi.Main.Version != "" {
		b.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		case "CGO_ENABLED":
			b.Cgo = s.Value == "1"
		}
	}
	return b
}

// String is the line `shoal version` prints.
func (b Build) String() string {
	modified := ""
	if b.Modified {
		modified = " (modified)"
	}
	return fmt.Sprintf("shoal %s revision %s%s %s %s/%s", b.Version, b.Revision, modified, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// Revision is the git revision of this binary: from its build info, else
// from git in the current folder, else "unknown".
func Revision() string {
	if b := ReadBuild(); b.Revision != "unknown" {
		if b.Modified {
			return b.Revision + "+dirty"
		}
		return b.Revision
	}
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	rev := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		rev += "+dirty"
	}
	return rev + " (from git in the current folder)"
}

// Report is what `shoal info` prints: how the binary was built, its GEMM
// path, its threads and its GPUs; `--json` prints it as is.
type Report struct {
	Build   BuildInfo   `json:"build"`
	GEMM    GEMMInfo    `json:"gemm"`
	Threads ThreadsInfo `json:"threads"`
	GPU     GPUInfo     `json:"gpu"`
}

type BuildInfo struct {
	Version  string `json:"version"`
	Revision string `json:"revision"`
	Modified bool   `json:"modified"`
	Go       string `json:"go"`
	OS       string `json:"os"`
	Arch     string `json:"arch"`
	Cgo      bool   `json:"cgo"`
}

type GEMMInfo struct {
	// Backend is the GEMM path a worker uses: "cpu/openblas" or "cpu/gonum".
	Backend string `json:"backend"`
	// Path and Config describe the OpenBLAS library, when it is used.
	Path   string `json:"path,omitempty"`
	Config string `json:"config,omitempty"`
	// Reason says why this path: the library found, or why OpenBLAS is
	// not used.
	Reason string `json:"reason"`
}

type ThreadsInfo struct {
	NumCPU     int `json:"num_cpu"`
	GOMAXPROCS int `json:"gomaxprocs"`
	// OpenBLAS is the library's thread count before any worker sets its
	// own (OPENBLAS_NUM_THREADS, else all cores); 0 without OpenBLAS.
	OpenBLAS int `json:"openblas"`
	// Env holds the variables that change thread counts or the library.
	Env map[string]string `json:"env"`
}

type GPUInfo struct {
	// Driver says whether NVML answered; Detail is its version or why not.
	Driver bool   `json:"driver"`
	Detail string `json:"detail"`
	// NVML is what the driver reports: every GPU, visible or not.
	NVML *gpu.Inventory `json:"nvml,omitempty"`
	// VisibleEnv is CUDA_VISIBLE_DEVICES, when set; Visible holds the
	// NVML index of CUDA ordinal 0, 1, ... under it; VisibleNote says
	// where the variable went wrong.
	VisibleEnv  *string `json:"cuda_visible_devices,omitempty"`
	Visible     []int   `json:"visible,omitempty"`
	VisibleNote string  `json:"visible_note,omitempty"`
	// CUDALibraries are the libraries loaded for --device cuda, or
	// CUDAError says why they were not.
	CUDALibraries []string `json:"cuda_libraries,omitempty"`
	CUDAError     string   `json:"cuda_error,omitempty"`
	// Ranks say where --device auto puts the worker of each local rank.
	Ranks []RankDevice `json:"local_ranks"`
}

// RankDevice is where --device auto puts the worker of local rank
// LocalRank: Device is "cpu" or "cuda:N".
type RankDevice struct {
	LocalRank int    `json:"local_rank"`
	Device    string `json:"device"`
	Why       string `json:"why"`
}

// Gather reads the report of this process and machine.
func Gather() Report {
	var r Report
	b := ReadBuild()
	r.Build = BuildInfo{Version: b.Version, Revision: b.Revision, Modified: b.Modified, Go: runtime.Version(),
		OS: runtime.GOOS, Arch: runtime.GOARCH, Cgo: b.Cgo}

	// Threads 0: report the library's own setting; a worker sets its own.
	be, why := nn.NewBestCPU(0)
	r.GEMM = GEMMInfo{Backend: be.Name(), Reason: why}
	if o, ok := be.(*nn.OpenBLAS); ok {
		r.GEMM.Path, r.GEMM.Config = o.Path(), o.Config()
		r.Threads.OpenBLAS = o.Threads()
	}
	r.Threads.NumCPU = runtime.NumCPU()
	r.Threads.GOMAXPROCS = runtime.GOMAXPROCS(0)
	r.Threads.Env = map[string]string{}
	for _, k := range []string{nn.EnvOpenBLAS, "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "GOMAXPROCS"} {
		if v, ok := os.LookupEnv(k); ok {
			r.Threads.Env[k] = v
		}
	}
	r.GPU = GatherGPU(os.LookupEnv, gpu.Devices, gpu.Libraries, gpu.Count)
	return r
}

// GatherGPU asks NVML for the GPUs and CUDA for its libraries, and places
// local ranks as --device auto would (with Count, as a worker does).
func GatherGPU(lookup func(string) (string, bool), devices func() (gpu.Inventory, error),
	libraries func() ([]string, error), count func() (int, error)) GPUInfo {
	var g GPUInfo
	inv, err := devices()
	if err != nil {
		g.Detail = oneLine(err)
	} else {
		g.Driver, g.NVML = true, &inv
		g.Detail = fmt.Sprintf("NVIDIA driver %s (CUDA %s), %d GPU(s), NVML %s", inv.Driver, inv.CUDA, len(inv.GPUs), inv.Library)
		env, set := lookup("CUDA_VISIBLE_DEVICES")
		if set {
			g.VisibleEnv = &env
		}
		vis, note := inv.Visible(env, set)
		for _, v := range vis {
			g.Visible = append(g.Visible, v.Index)
		}
		g.VisibleNote = note
	}
	if g.CUDALibraries, err = libraries(); err != nil {
		g.CUDAError = err.Error()
	}
	n, err := count()
	if err != nil || n < 1 {
		n = 1 // every rank goes where rank 0 goes: the CPU
	}
	for rank := range n {
		p, err := (gpu.Choice{}).Resolve(rank, count)
		rd := RankDevice{LocalRank: rank, Device: "cpu", Why: p.Why}
		if err != nil {
			rd.Why = err.Error()
		}
		if p.OnGPU() {
			rd.Device = fmt.Sprintf("cuda:%d", p.Ordinal)
		}
		g.Ranks = append(g.Ranks, rd)
	}
	return g
}

// oneLine returns err's first line.
func oneLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// WriteText writes r as `shoal info` prints it.
func (r Report) WriteText(w io.Writer) error {
	b := r.Build
	mod := ""
	if b.Modified {
		mod = " (modified)"
	}
	cgo := "off"
	if b.Cgo {
		cgo = "on"
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "build:    shoal %s revision %s%s, %s %s/%s, cgo %s\n", b.Version, b.Revision, mod, b.Go, b.OS, b.Arch, cgo)
	fmt.Fprintf(&sb, "gemm:     %s\n", r.GEMM.Backend)
	if r.GEMM.Path != "" {
		fmt.Fprintf(&sb, "          library %s\n          %s\n", r.GEMM.Path, r.GEMM.Config)
		// Libraries skipped first, if any (a SHOAL_OPENBLAS that failed).
		_, skipped, _ := strings.Cut(r.GEMM.Reason, "\n")
		for _, line := range strings.Split(skipped, "\n") {
			if line = strings.TrimSpace(line); line != "" {
				fmt.Fprintf(&sb, "          %s\n", line)
			}
		}
	} else {
		// The reason may list many paths tried, one per line.
		for _, line := range strings.Split(r.GEMM.Reason, "\n") {
			fmt.Fprintf(&sb, "          %s\n", strings.TrimSpace(line))
		}
	}
	t := r.Threads
	fmt.Fprintf(&sb, "threads:  %d CPUs, GOMAXPROCS %d", t.NumCPU, t.GOMAXPROCS)
	if t.OpenBLAS > 0 {
		fmt.Fprintf(&sb, ", OpenBLAS %d by default (each worker sets its own)", t.OpenBLAS)
	}
	sb.WriteString("\n")
	for _, k := range []string{nn.EnvOpenBLAS, "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "GOMAXPROCS"} {
		if v, ok := t.Env[k]; ok {
			fmt.Fprintf(&sb, "          %s=%s\n", k, v)
		}
	}
	writeGPU(&sb, r.GPU)
	_, err := io.WriteString(w, sb.String())
	return err
}

// printGPU writes the gpu:, cuda: and devices: lines.
func writeGPU(sb *strings.Builder, g GPUInfo) {
	fmt.Fprintf(sb, "gpu:      %s\n", g.Detail)
	if g.NVML != nil {
		for _, d := range g.NVML.GPUs {
			fmt.Fprintf(sb, "          GPU %d: %s\n", d.Index, d)
		}
		if g.VisibleEnv != nil {
			fmt.Fprintf(sb, "          CUDA_VISIBLE_DEVICES=%q leaves GPU(s) %v as cuda:0 on\n", *g.VisibleEnv, g.Visible)
		}
		if g.VisibleNote != "" {
			fmt.Fprintf(sb, "          %s\n", g.VisibleNote)
		}
	}
	if g.CUDAError != "" {
		fmt.Fprintf(sb, "cuda:     not loaded, so --device cuda fails and auto means the CPU:\n")
		for _, line := range strings.Split(g.CUDAError, "\n") {
			fmt.Fprintf(sb, "          %s\n", strings.TrimSpace(line))
		}
	} else {
		fmt.Fprintf(sb, "cuda:     %s\n", strings.Join(g.CUDALibraries, ", "))
	}
	for i, rd := range g.Ranks {
		head := "devices:  "
		if i > 0 {
			head = "          "
		}
		if rd.Device == "cpu" && len(g.Ranks) == 1 {
			fmt.Fprintf(sb, "%s--device auto: every worker on the CPU\n", head)
			continue
		}
		fmt.Fprintf(sb, "%slocal rank %d: %s (%s)\n", head, rd.LocalRank, rd.Device, rd.Why)
	}
	if n := len(g.Ranks); n > 1 || (n == 1 && g.Ranks[0].Device != "cpu") {
		fmt.Fprintf(sb, "          local rank r >= %d shares cuda:(r mod %d)\n", n, n)
	}
}
