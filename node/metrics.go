package node

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoalml/shoal/launch"
	"github.com/shoalml/shoal/metrics"
	"github.com/shoalml/shoal/worker"
)

// endpoint is a process's metrics: its registry and, once served, the
// HTTP endpoint.
type endpoint struct {
	reg *prometheus.Registry
	srv *metrics.Server
}

// serveMetrics starts the endpoint of a process at addr, role "ps" (rank:
// its shard) or "worker", with collectors registered by add; it says
// where on out (a launch event under a launcher, else a line). With no
// addr it returns nil, on which close does nothing.
func serveMetrics(addr, role string, rank int, add func(prometheus.Registerer), log *slog.Logger, out io.Writer, events bool) (*endpoint, error) {
	if addr == "" {
		return nil, nil
	}
	e := &endpoint{reg: metrics.NewRegistry()}
	add(e.reg)
	srv, err := metrics.Listen(addr, e.reg, log)
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

// workerMetrics serves a worker's metrics at addr, when set, and counts
// each step through cfg.OnStep (after what is there already). The
// returned Worker (nil when off) takes the sources known later.
func workerMetrics(addr string, cfg *worker.Config, rank int, src metrics.WorkerSources, log *slog.Logger, out io.Writer, events bool) (*metrics.Worker, func(), error) {
	var w *metrics.Worker
	e, err := serveMetrics(addr, "worker", rank, func(reg prometheus.Registerer) { w = metrics.NewWorker(reg, rank, src) }, log, out, events)
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
