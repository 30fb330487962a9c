package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/shoalml/shoal/nn"
)

// infoReport is what `shoal info` prints; `--json` prints it as is.
type infoReport struct {
	Build   buildInfo   `json:"build"`
	GEMM    gemmInfo    `json:"gemm"`
	Threads threadsInfo `json:"threads"`
	GPU     gpuInfo     `json:"gpu"`
}

type buildInfo struct {
	Version  string `json:"version"`
	Revision string `json:"revision"`
	Modified bool   `json:"modified"`
	Go       string `json:"go"`
	OS       string `json:"os"`
	Arch     string `json:"arch"`
	Cgo      bool   `json:"cgo"`
}

type gemmInfo struct {
	// Backend is the GEMM path a worker uses: "cpu/openblas" or "cpu/gonum".
	Backend string `json:"backend"`
	// Path and Config describe the OpenBLAS library, when it is used.
	Path   string `json:"path,omitempty"`
	Config string `json:"config,omitempty"`
	// Reason says why this path: the library found, or why OpenBLAS is
	// not used.
	Reason string `json:"reason"`
}

type threadsInfo struct {
	NumCPU     int `json:"num_cpu"`
	GOMAXPROCS int `json:"gomaxprocs"`
	// OpenBLAS is the library's thread count before any worker sets its
	// own (OPENBLAS_NUM_THREADS, else all cores); 0 without OpenBLAS.
	OpenBLAS int `json:"openblas"`
	// Env holds the variables that change thread counts or the library.
	Env map[string]string `json:"env"`
}

type gpuInfo struct {
	Driver bool   `json:"driver"`
	Detail string `json:"detail"`
}

const infoSynopsis = `Prints how this binary was built and what it will compute with: the GEMM path
(OpenBLAS, loaded at run time, or gonum's pure-Go BLAS, and why), the thread
settings, and whether an NVIDIA driver is present. It links no GPU library and
runs on any machine.`

func runInfo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("info", infoSynopsis, stderr)
	jsonOut := fs.Bool("json", false, "print one JSON object")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	r := gatherInfo()
	if *jsonOut {
		return printJSONLine(stdout, r)
	}
	return printInfo(stdout, r)
}

func gatherInfo() infoReport {
	var r infoReport
	b := readBuild()
	r.Build = buildInfo{Version: b.version, Revision: b.revision, Modified: b.modified, Go: runtime.Version(),
		OS: runtime.GOOS, Arch: runtime.GOARCH, Cgo: b.cgo}

	// Threads 0: report the library's own setting; a worker sets its own.
	be, why := nn.NewBestCPU(0)
	r.GEMM = gemmInfo{Backend: be.Name(), Reason: why}
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
	r.GPU = nvidiaDriver("/")
	return r
}

func printInfo(w io.Writer, r infoReport) error {
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
	fmt.Fprintf(&sb, "gpu:      %s\n", r.GPU.Detail)
	_, err := io.WriteString(w, sb.String())
	return err
}

// nvidiaDriver looks for the NVIDIA kernel driver and its management
// library under root ("/" but in tests) without loading anything: a
// binary that linked them could not start on a machine without a GPU.
func nvidiaDriver(root string) gpuInfo {
	if v, err := os.ReadFile(filepath.Join(root, "proc/driver/nvidia/version")); err == nil {
		first, _, _ := strings.Cut(strings.TrimSpace(string(v)), "\n")
		return gpuInfo{Driver: true, Detail: "NVIDIA driver: " + strings.TrimSpace(first)}
	}
	dirs := []string{"usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu", "usr/lib64", "usr/lib", "usr/local/nvidia/lib64", "usr/lib/wsl/lib"}
	for _, d := range filepath.SplitList(os.Getenv("LD_LIBRARY_PATH")) {
		if filepath.IsAbs(d) {
			dirs = append(dirs, strings.TrimPrefix(d, "/"))
		}
	}
	for _, d := range dirs {
		p := filepath.Join(root, d, "libnvidia-ml.so.1")
		if _, err := os.Stat(p); err == nil {
			return gpuInfo{Driver: true, Detail: "NVIDIA driver library " + filepath.Join("/", d, "libnvidia-ml.so.1") + " (no /proc/driver/nvidia: the kernel module is not loaded)"}
		}
	}
	return gpuInfo{Detail: "no NVIDIA driver (no /proc/driver/nvidia, no libnvidia-ml.so.1)"}
}
