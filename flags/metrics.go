package flags

import (
	"flag"
	"fmt"
	"os"

	"github.com/shoalml/shoal/timeline"
)

// Metrics is --metrics-addr, on shoal ps and shoal worker.
type Metrics struct {
	Addr string
}

// Register adds the flag to fs.
func (m *Metrics) Register(fs *flag.FlagSet) {
	fs.StringVar(&m.Addr, "metrics-addr", "", SectionOutput.Usage("serve Prometheus metrics at http://ADDR/metrics (HOST:PORT; port 0 picks one); empty: none"))
}

// Timeline is --timeline, on shoal ps and shoal worker.
type Timeline struct {
	Path string
}

// Register adds the flag to fs.
func (f *Timeline) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.Path, "timeline", "", SectionOutput.Usage("write this process's per-step timeline to FILE as Chrome trace-event JSON (open it in ui.perfetto.dev or chrome://tracing); empty: none"))
}

// Open starts the timeline of process (nil when --timeline is not set),
// naming its rows.
func (f *Timeline) Open(process string, rows ...string) (*timeline.Writer, error) {
	if f.Path == "" {
		return nil, nil
	}
	if err := WritableFile("--timeline", f.Path); err != nil {
		return nil, err
	}
	w, err := timeline.Create(f.Path, process, os.Getpid())
	if err != nil {
		return nil, fmt.Errorf("--timeline: %w", err)
	}
	for tid, name := range rows {
		w.Thread(tid, name)
	}
	return w, nil
}
