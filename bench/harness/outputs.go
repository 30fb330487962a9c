package harness

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/shoalml/shoal/bench"
	"github.com/shoalml/shoal/nn"
)

// newResults is the Results of a run of command on this machine, at
// revision, started now.
func newResults(command []string, revision string, simulated bool) *bench.Results {
	return &bench.Results{Schema: bench.SchemaVersion, Started: time.Now().UTC().Truncate(time.Second),
		Command: command, Revision: revision, Machine: DescribeMachine(), Simulated: simulated}
}

// WriteOutputs writes results.json (validated against the schema), the
// plots and report.md into dir, and says so on stdout.
func WriteOutputs(dir string, res *bench.Results, stdout io.Writer) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := bench.Validate(b); err != nil {
		return fmt.Errorf("the results do not match their schema (a bug): %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	return WriteReport(dir, res, stdout)
}

// WriteReport writes the plots and report.md of res into dir, and says
// so on stdout.
func WriteReport(dir string, res *bench.Results, stdout io.Writer) error {
	plots, err := bench.WritePlots(dir, res)
	if err != nil {
		return fmt.Errorf("plots: %w", err)
	}
	f, err := os.Create(filepath.Join(dir, "report.md"))
	if err != nil {
		return err
	}
	if err := bench.WriteReport(f, res, plots); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s: report.md and %d plots\n", dir, len(plots))
	return nil
}

// DescribeMachine describes this host.
func DescribeMachine() bench.Machine {
	m := bench.Machine{OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU(), Go: runtime.Version()}
	m.Hostname, _ = os.Hostname()
	m.CPUModel = procField("/proc/cpuinfo", func(l string) (string, bool) {
		k, v, ok := strings.Cut(l, ":")
		return strings.TrimSpace(v), ok && strings.TrimSpace(k) == "model name"
	})
	if v := procField("/proc/meminfo", func(l string) (string, bool) { return strings.CutPrefix(l, "MemTotal:") }); v != "" {
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		m.MemBytes = kb << 10
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			m.LoadAvg, _ = strconv.ParseFloat(f[0], 64)
		}
	}
	be, _ := nn.NewBestCPU(1)
	m.GEMM = be.Name()
	if math.IsNaN(m.LoadAvg) {
		m.LoadAvg = 0
	}
	return m
}

// procField is the value that match finds in the first line of file it
// matches, or "".
func procField(file string, match func(line string) (string, bool)) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return ""
	}
	for l := range strings.Lines(string(b)) {
		if v, ok := match(l); ok {
			return v
		}
	}
	return ""
}

// describeRecord is one progress line.
func describeRecord(r *bench.Record) string {
	name := r.ID
	if r.Error != "" {
		l, _, _ := strings.Cut(r.Error, "\n")
		return fmt.Sprintf("%s: FAILED: %s", name, l)
	}
	s := fmt.Sprintf("%s: %.0f samples/s, step p50 %.1f ms", name, r.SamplesPerSec, 1e3*r.StepTime.Step.P50)
	if r.Comm != nil {
		s += fmt.Sprintf(", comm %.1f ms (model %.1f ms, %.2f×)", 1e3*r.Comm.MeasuredSeconds, 1e3*r.Comm.AnalyticSeconds, r.Comm.Ratio)
	}
	if r.LocalSteps > 0 {
		s += fmt.Sprintf(", sent %.0f B/sample", r.BytesSentPerSample)
	}
	if r.TestAccuracy >= 0 {
		s += fmt.Sprintf(", test %.2f%%", 100*r.TestAccuracy)
	}
	return s
}
