package metrics

import (
	"maps"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/worker"
)

// WorkerSources are what a worker's metrics read besides its step times;
// each may be nil (not exported). Bytes, Staleness and Dropped are read
// after each step, on the worker's goroutine (they may read what the
// worker's strategy writes without locking); Members when Prometheus
// scrapes, so it must be safe to call from any goroutine.
type WorkerSources struct {
	// Bytes reads the bytes this worker's connections sent and received.
	Bytes func() (sent, received int64)
	// Staleness reads how stale this worker's pushes were (async, SSP).
	Staleness func() consistency.Staleness
	// Dropped reads how many of its pushes the shards dropped (sync with
	// backup workers).
	Dropped func() int64
	// Members reads how many members the job's gossip sees alive.
	Members func() int
	// ReformRefusals reads the Reform requests the member's Elastic
	// service refused, by reason (elastic.Coordinator.Refusals).
	ReformRefusals func() map[string]int64
}

// Worker exports one worker's figures, labelled rank=r.
type Worker struct {
	steps, samples prometheus.Counter
	phases         [7]prometheus.Observer // StepTimes' fields, in phaseNames' order

	mu     sync.Mutex
	src    WorkerSources
	labels prometheus.Labels
	descs  map[string]*prometheus.Desc
	// What the last step's end read of src, under mu.
	sent, received, dropped int64
	staleness               consistency.Staleness
}

// phaseNames are the phase label's values, in the order of StepTimes'
// fields.
var phaseNames = [7]string{"step", "data", "compute", "wait", "pull", "push", "reduce"}

// NewWorker registers worker rank's metrics on reg.
func NewWorker(reg prometheus.Registerer, rank int, src WorkerSources) *Worker {
	l := prometheus.Labels{"rank": strconv.Itoa(rank)}
	w := &Worker{labels: l, src: src,
		steps: prometheus.NewCounter(prometheus.CounterOpts{Name: "shoal_worker_steps_total", Help: "Training steps done.", ConstLabels: l}),
		samples: prometheus.NewCounter(prometheus.CounterOpts{Name: "shoal_worker_samples_total",
			Help: "Training samples the steps computed gradients on.", ConstLabels: l}),
	}
	phases := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "shoal_worker_phase_seconds",
		Help: "Where each step's time went: step is the whole step; data waiting for batches, compute forward and backward, " +
			"wait a pull held for other workers, pull the rest of it, push the gradient push, reduce the allreduce and local update.",
		Buckets:     PhaseBuckets,
		ConstLabels: l,
	}, []string{"phase"})
	for i, p := range phaseNames {
		w.phases[i] = phases.WithLabelValues(p)
	}
	desc := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, l) }
	w.descs = map[string]*prometheus.Desc{
		"sent":      desc("shoal_worker_sent_bytes_total", "Bytes this worker's connections sent (headers and framing included)."),
		"received":  desc("shoal_worker_received_bytes_total", "Bytes this worker's connections received."),
		"staleness": desc("shoal_worker_push_staleness_steps", "How many updates old this worker's pushes were when applied."),
		"dropped":   desc("shoal_worker_dropped_pushes_total", "This worker's pushes that came after their step was applied (sync backup workers)."),
		"members":   desc("shoal_members", "Members the job's gossip sees alive (workers and shards)."),
		"reforms": prometheus.NewDesc("shoal_elastic_refused_reforms_total",
			"Reform requests this member's Elastic service refused, by reason (signature: not signed with the job's secret; host: not from the member's host; request: another job's, or a field out of range; member: not in the membership yet).",
			[]string{"reason"}, l),
	}
	reg.MustRegister(w.steps, w.samples, phases, w)
	return w
}

// Step counts one step and its times (worker.Config.OnStep).
func (w *Worker) Step(t worker.StepTimes) {
	w.steps.Inc()
	w.samples.Add(float64(t.Samples))
	for i, d := range [7]float64{t.Step.Seconds(), t.Data.Seconds(), t.Compute.Seconds(), t.Wait.Seconds(), t.Pull.Seconds(),
		t.Push.Seconds(), t.Reduce.Seconds()} {
		w.phases[i].Observe(d)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.src.Bytes != nil {
		w.sent, w.received = w.src.Bytes()
	}
	if w.src.Staleness != nil {
		w.staleness = maps.Clone(w.src.Staleness())
	}
	if w.src.Dropped != nil {
		w.dropped = w.src.Dropped()
	}
}

// SetSources replaces the sources src sets (those known only once the
// worker runs, such as its strategy's counters); nil fields keep theirs.
func (w *Worker) SetSources(src WorkerSources) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if src.Bytes != nil {
		w.src.Bytes = src.Bytes
	}
	if src.Staleness != nil {
		w.src.Staleness = src.Staleness
	}
	if src.Dropped != nil {
		w.src.Dropped = src.Dropped
	}
	if src.Members != nil {
		w.src.Members = src.Members
	}
	if src.ReformRefusals != nil {
		w.src.ReformRefusals = src.ReformRefusals
	}
}

// Describe implements prometheus.Collector.
func (w *Worker) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range w.descs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (w *Worker) Collect(ch chan<- prometheus.Metric) {
	w.mu.Lock()
	src, sent, received, dropped, stale := w.src, w.sent, w.received, w.dropped, w.staleness
	w.mu.Unlock()
	d := w.descs
	if src.Bytes != nil {
		ch <- prometheus.MustNewConstMetric(d["sent"], prometheus.CounterValue, float64(sent))
		ch <- prometheus.MustNewConstMetric(d["received"], prometheus.CounterValue, float64(received))
	}
	if src.Staleness != nil {
		ch <- stalenessHistogram(d["staleness"], stale)
	}
	if src.Dropped != nil {
		ch <- prometheus.MustNewConstMetric(d["dropped"], prometheus.CounterValue, float64(dropped))
	}
	if src.Members != nil {
		ch <- prometheus.MustNewConstMetric(d["members"], prometheus.GaugeValue, float64(src.Members()))
	}
	if src.ReformRefusals != nil {
		for reason, n := range src.ReformRefusals() {
			ch <- prometheus.MustNewConstMetric(d["reforms"], prometheus.CounterValue, float64(n), reason)
		}
	}
}
