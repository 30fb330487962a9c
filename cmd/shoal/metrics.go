package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/shoalml/shoal/timeline"
)

// metricsFlags is --metrics-addr, on shoal ps and shoal worker.
type metricsFlags struct {
	addr string
}

func (m *metricsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&m.addr, "metrics-addr", "", "serve Prometheus metrics at http://ADDR/metrics (HOST:PORT; port 0 picks one); empty: none")
}

// timelineFlags is --timeline, on shoal ps and shoal worker.
type timelineFlags struct {
	path string
}

func (f *timelineFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.path, "timeline", "", "write this process's per-step timeline to FILE as Chrome trace-event JSON (open it in ui.perfetto.dev or chrome://tracing); empty: none")
}

// open starts the timeline of process (nil when --timeline is not set),
// naming its rows.
func (f *timelineFlags) open(process string, rows ...string) (*timeline.Writer, error) {
	if f.path == "" {
		return nil, nil
	}
	if err := writableFile("--timeline", f.path); err != nil {
		return nil, err
	}
	w, err := timeline.Create(f.path, process, os.Getpid())
	if err != nil {
		return nil, fmt.Errorf("--timeline: %w", err)
	}
	for tid, name := range rows {
		w.Thread(tid, name)
	}
	return w, nil
}

// closeTimeline closes w, adding its error to err's.
func closeTimeline(w *timeline.Writer, err *error) {
	if cerr := w.Close(); cerr != nil && *err == nil {
		*err = fmt.Errorf("--timeline: %w", cerr)
	}
}
