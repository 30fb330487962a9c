package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/ps"
)

// PhaseBuckets are the bounds, in seconds, of the time histograms: 100 µs
// to about 52 s, doubling.
var PhaseBuckets = prometheus.ExponentialBuckets(1e-4, 2, 20)

// StalenessBuckets are the bounds, in steps, of the staleness histograms.
var StalenessBuckets = []float64{0, 1, 2, 4, 8, 16, 32, 64}

// PS exports one shard's figures. Create it before the shard, give its
// ObserveWait to ps.Config.OnWait, then Attach the shard.
type PS struct {
	wait    prometheus.Histogram
	server  *ps.Server
	labels  prometheus.Labels
	descs   map[string]*prometheus.Desc
	started time.Time
}

// NewPS registers a shard's metrics, labelled shard=idx, on reg.
func NewPS(reg prometheus.Registerer, idx int) *PS {
	l := prometheus.Labels{"shard": strconv.Itoa(idx)}
	m := &PS{labels: l, started: time.Now(), wait: prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:        "shoal_ps_pull_wait_seconds",
		Help:        "How long pulls waited for other workers: a sync barrier, the SSP staleness bound.",
		Buckets:     PhaseBuckets,
		ConstLabels: l,
	})}
	desc := func(name, help string, vars ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, vars, l)
	}
	m.descs = map[string]*prometheus.Desc{
		"steps":       desc("shoal_ps_steps_total", "Updates the shard applied (its clock)."),
		"pushes":      desc("shoal_ps_pushes_total", "Pushes applied (async, SSP) or taken into a step (sync)."),
		"pulls":       desc("shoal_ps_pulls_total", "Pulls served."),
		"duplicates":  desc("shoal_ps_duplicate_pushes_total", "Pushes for a step the worker had already pushed, ignored."),
		"dropped":     desc("shoal_ps_dropped_pushes_total", "Sync pushes that came after their step was applied (backup workers), dropped."),
		"rejected":    desc("shoal_ps_rejected_pushes_total", "Pushes refused, by reason (shape, non-finite, worker, step, magnitude, wire, session, plan, other).", "reason"),
		"rejPulls":    desc("shoal_ps_rejected_pulls_total", "Pulls as a worker refused, by reason (session: not the worker's session; worker: no worker of the job; plan: a partition plan version other than the shard's, from any reader).", "reason"),
		"short":       desc("shoal_ps_short_steps_total", "Sync steps applied without workers that left during the step."),
		"staleness":   desc("shoal_ps_push_staleness_steps", "How many updates old each applied push's gradient was."),
		"live":        desc("shoal_ps_live_workers", "Workers the shard waits for (sync, SSP)."),
		"changes":     desc("shoal_ps_membership_changes_total", "Changes of the live set: workers that left it, workers that (re)joined it.", "change"),
		"checkpoints": desc("shoal_ps_checkpoints_total", "Checkpoints written."),
		"ckptAge":     desc("shoal_ps_checkpoint_age_seconds", "Time since the newest checkpoint was written (since the start, before the first)."),
		"ckptStep":    desc("shoal_ps_checkpoint_step", "The clock of the newest checkpoint written."),
		"floats":      desc("shoal_ps_owned_floats", "Floats of the model this shard owns."),
		"outer":       desc("shoal_ps_outer_steps_total", "Outer steps applied (with --local-steps: sync, one a round; async, one per pseudo-gradient)."),
		"pgBytes":     desc("shoal_ps_pseudo_gradient_bytes_total", "Bytes of the pseudo-gradients applied or taken into an outer step, as they travelled (values in their encoding, int8's scales)."),
	}
	reg.MustRegister(m.wait, m)
	return m
}

// ObserveWait counts one wait of a pull (ps.Config.OnWait).
func (m *PS) ObserveWait(d time.Duration) { m.wait.Observe(d.Seconds()) }

// Attach makes the collector read s; until then it exports only the
// waits.
func (m *PS) Attach(s *ps.Server) { m.server = s }

// Describe implements prometheus.Collector.
func (m *PS) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range m.descs {
		ch <- d
	}
}

// Collect implements prometheus.Collector: it reads the shard's counters
// once per scrape.
func (m *PS) Collect(ch chan<- prometheus.Metric) {
	s := m.server
	if s == nil {
		return
	}
	st := s.Stats()
	d := m.descs
	counter := func(name string, v float64, vals ...string) {
		ch <- prometheus.MustNewConstMetric(d[name], prometheus.CounterValue, v, vals...)
	}
	gauge := func(name string, v float64) {
		ch <- prometheus.MustNewConstMetric(d[name], prometheus.GaugeValue, v)
	}
	counter("steps", float64(s.Clock()))
	counter("pushes", float64(st.Pushes))
	counter("pulls", float64(st.Pulls))
	counter("duplicates", float64(st.Duplicates))
	counter("dropped", float64(st.Dropped))
	for _, r := range []string{ps.RejectedShape, ps.RejectedNonFinite, ps.RejectedWorker, ps.RejectedStep, ps.RejectedMagnitude, ps.RejectedWire, ps.RejectedSession, ps.RejectedPlan, ps.RejectedOther} {
		counter("rejected", float64(st.RejectedBy[r]), r)
	}
	for _, r := range []string{ps.RejectedSession, ps.RejectedWorker, ps.RejectedPlan} {
		counter("rejPulls", float64(st.RejectedPullsBy[r]), r)
	}
	counter("short", float64(st.ShortSteps))
	ch <- stalenessHistogram(d["staleness"], st.Staleness)
	if s.Config().Mode != consistency.Async {
		gauge("live", float64(len(s.LiveWorkers())))
		counter("changes", float64(st.Left), "left")
		counter("changes", float64(st.Joined), "joined")
	}
	counter("checkpoints", float64(st.Checkpoints))
	if s.Config().CheckpointDir != "" {
		since, step := m.started, int64(0)
		if st.Checkpoints > 0 {
			since, step = st.LastCheckpoint, st.LastCheckpointClock
		}
		gauge("ckptAge", time.Since(since).Seconds())
		gauge("ckptStep", float64(step))
	}
	gauge("floats", float64(s.Floats()))
	if s.Config().LocalSteps > 0 {
		counter("outer", float64(s.Clock()))
		counter("pgBytes", float64(st.PushBytes))
	}
}

// stalenessHistogram is h as a Prometheus histogram over
// StalenessBuckets.
func stalenessHistogram(d *prometheus.Desc, h consistency.Staleness) prometheus.Metric {
	buckets := make(map[float64]uint64, len(StalenessBuckets))
	var count uint64
	var sum float64
	for s, n := range h.All() {
		count += uint64(n)
		sum += float64(s) * float64(n)
		for _, b := range StalenessBuckets {
			if float64(s) <= b {
				buckets[b] += uint64(n)
			}
		}
	}
	for _, b := range StalenessBuckets {
		buckets[b] += 0 // every bound is exported, also when empty
	}
	return prometheus.MustNewConstHistogram(d, count, sum, buckets)
}
