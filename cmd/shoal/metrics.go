package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoalml/shoal/launch"
	"github.com/shoalml/shoal/metrics"
	"github.com/shoalml/shoal/timeline"
	"github.com/shoalml/shoal/worker"
)

// metricsFlags is --metrics-addr, on shoal ps and shoal worker.
type metricsFlags struct {
	addr string
}

func (m *metricsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&m.addr, "metrics-addr", "", "serve Prometheus metrics at http://ADDR/metrics (HOST:PORT; port 0 picks one); empty: none")
}

// endpoint is a process's metrics: its registry and, once served, the
// HTTP endpoint.
type endpoint struct {
	reg *prometheus.Registry
	srv *metrics.Server
}

// serve starts the endpoint of a process, role "ps" (rank: its shard) or
// "worker", when --metrics-addr is set, with collectors registered by
// add; it says where on out (a launch event under a launcher, else a
// line). Off, it returns nil, on which close does nothing.
func (m *metricsFlags) serve(role string, rank int, add func(prometheus.Registerer), log *slog.Logger, out io.Writer, events bool) (*endpoint, error) {
	if m.addr == "" {
		return nil, nil
	}
	e := &endpoint{reg: metrics.NewRegistry()}
	add(e.reg)
	srv, err := metrics.Listen(m.addr, e.reg, log)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	e.srv = srv
	log.Info("serving metrics", "component", role, "url", srv.URL())
	if events {
		launch.Emit(out, launch.Event{Event: launch.Metrics, Role: role, Rank: rank, Shard: rank, Addr: srv.Addr()})
	} else {
		fmt.Fprintf(out, "shoal %s: Prometheus metrics at %s\n", role, srv.URL())
	}
	return e, nil
}

func (e *endpoint) close() {
	if e != nil {
		e.srv.Close()
	}
}

// workerMetrics serves a worker's metrics when --metrics-addr is set and
// counts each step through cfg.OnStep (after what is there already). The
// returned Worker (nil when off) takes the sources known later.
func (m *metricsFlags) workerMetrics(cfg *worker.Config, rank int, src metrics.WorkerSources, log *slog.Logger, out io.Writer, events bool) (*metrics.Worker, func(), error) {
	var w *metrics.Worker
	e, err := m.serve("worker", rank, func(reg prometheus.Registerer) { w = metrics.NewWorker(reg, rank, src) }, log, out, events)
	if err != nil || e == nil {
		return nil, func() {}, err
	}
	prev := cfg.OnStep
	cfg.OnStep = func(step int64, t worker.StepTimes) {
		if prev != nil {
			prev(step, t)
		}
		w.Step(t)
	}
	return w, e.close, nil
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
