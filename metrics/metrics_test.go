package metrics_test

import (
	"context"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/metrics"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
	"github.com/shoalml/shoal/ps"
	"github.com/shoalml/shoal/shard"
	"github.com/shoalml/shoal/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// scrape serves reg, reads its /metrics once over HTTP as Prometheus
// would, and closes the endpoint.
func scrape(t *testing.T, reg *prometheus.Registry) map[string]*dto.MetricFamily {
	t.Helper()
	srv, err := metrics.Listen("127.0.0.1:0", reg, nil)
	require.NoError(t, err)
	defer func() { assert.NoError(t, srv.Close()) }()
	fams, err := metrics.Scrape(srv.URL(), 10*time.Second)
	require.NoError(t, err)
	return fams
}

// value is the value of the counter or gauge name whose labels include
// want; NaN if there is none.
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	f := fams[name]
	if f == nil {
		return math.NaN()
	}
next:
	for _, m := range f.Metric {
		for k, v := range want {
			found := false
			for _, l := range m.Label {
				found = found || (l.GetName() == k && l.GetValue() == v)
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	return math.NaN()
}

func TestAShardsCountersAsPrometheusReadsThem(t *testing.T) {
	var l nn.Layout
	l.Add("w", 8)
	plan, err := shard.New(l.Size(), 1, 2*4)
	require.NoError(t, err)
	reg := metrics.NewRegistry()
	m := metrics.NewPS(reg, 0)
	cfg := ps.Config{Mode: consistency.SSP, Staleness: 1, Workers: 2, Plan: plan, Layout: l, Optimizer: optim.DefaultConfig(),
		CheckpointDir: t.TempDir(), CheckpointEvery: 2, OnWait: m.ObserveWait}
	s, err := ps.New(cfg, make([]float32, 8))
	require.NoError(t, err)
	m.Attach(s)
	ctx := context.Background()
	sessions := map[int64]ps.Session{}
	for w := range int64(2) {
		j, err := s.Join(w, 0, 1)
		require.NoError(t, err)
		sessions[w] = j.Session
	}
	push := func(w, step int64, g float32) error {
		grads := make([]float32, 8)
		grads[0] = g
		_, err := s.Push(ctx, ps.Push{WorkerID: w, Session: sessions[w], Step: step, Clock: s.Clock(), Ranges: s.Ranges(), Grads: grads})
		return err
	}
	held := sessions[0]
	sessions[0] = ps.Session{}
	require.Error(t, push(0, 0, 1), "worker 0 without its session")
	require.Error(t, s.CheckPull(0, ps.Session{}), "a pull as worker 0 without its session")
	sessions[0] = held
	require.NoError(t, push(0, 0, 1))
	require.NoError(t, push(0, 1, 1))
	require.Error(t, push(1, 0, float32(math.NaN())))
	require.Error(t, push(7, 0, 1)) // no such worker
	// Worker 0 is two steps ahead of worker 1, which pushed none: its
	// pull for step 3 waits, here until its deadline.
	wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	assert.ErrorIs(t, s.WaitToRead(wctx, 0, 3), ps.ErrWaitTimeout)
	cancel()
	require.NoError(t, push(1, 0, 1))
	require.NoError(t, push(1, 1, 1))
	s.WorkerGone(1)
	_, err = s.Join(1, 0, 1)
	require.NoError(t, err)
	s.CountRefused(ps.RejectedPlan) // as the gRPC adapter counts a push, and a pull, of another plan version
	s.CountRefusedPull(ps.RejectedPlan)

	fams := scrape(t, reg)
	shard0 := map[string]string{"shard": "0"}
	assert.Equal(t, 4.0, value(fams, "shoal_ps_steps_total", shard0))
	assert.Equal(t, 4.0, value(fams, "shoal_ps_pushes_total", shard0))
	assert.Equal(t, 1.0, value(fams, "shoal_ps_rejected_pushes_total", map[string]string{"reason": "non-finite"}))
	assert.Equal(t, 1.0, value(fams, "shoal_ps_rejected_pushes_total", map[string]string{"reason": "worker"}))
	assert.Equal(t, 0.0, value(fams, "shoal_ps_rejected_pushes_total", map[string]string{"reason": "magnitude"}))
	assert.Equal(t, 1.0, value(fams, "shoal_ps_rejected_pushes_total", map[string]string{"reason": "session"}))
	assert.Equal(t, 1.0, value(fams, "shoal_ps_rejected_pulls_total", map[string]string{"reason": "session"}))
	assert.Equal(t, 0.0, value(fams, "shoal_ps_rejected_pulls_total", map[string]string{"reason": "worker"}))
	assert.Equal(t, 1.0, value(fams, "shoal_ps_rejected_pushes_total", map[string]string{"reason": "plan"}))
	assert.Equal(t, 1.0, value(fams, "shoal_ps_rejected_pulls_total", map[string]string{"reason": "plan"}))
	assert.Equal(t, 4.0, value(fams, "shoal_ps_push_staleness_steps", shard0))
	assert.Equal(t, 1.0, value(fams, "shoal_ps_pull_wait_seconds", shard0))
	assert.Equal(t, 2.0, value(fams, "shoal_ps_live_workers", shard0))
	assert.Equal(t, 1.0, value(fams, "shoal_ps_membership_changes_total", map[string]string{"change": "left"}))
	assert.Equal(t, 1.0, value(fams, "shoal_ps_membership_changes_total", map[string]string{"change": "joined"}))
	assert.Equal(t, 2.0, value(fams, "shoal_ps_checkpoints_total", shard0))
	assert.Equal(t, 4.0, value(fams, "shoal_ps_checkpoint_step", shard0))
	age := value(fams, "shoal_ps_checkpoint_age_seconds", shard0)
	assert.True(t, age >= 0 && age < 60, "checkpoint age %v s", age)
	assert.Equal(t, 8.0, value(fams, "shoal_ps_owned_floats", shard0))
	assert.NotNil(t, fams["go_goroutines"], "the Go runtime's collector")
	require.NoError(t, s.Close())
}

func TestAWorkersStepsAsPrometheusReadsThem(t *testing.T) {
	reg := metrics.NewRegistry()
	var sent int64
	stale := consistency.Staleness{}
	w := metrics.NewWorker(reg, 3, metrics.WorkerSources{Bytes: func() (int64, int64) { return sent, 2 * sent }})
	w.SetSources(metrics.WorkerSources{Staleness: func() consistency.Staleness { return stale }, Members: func() int { return 5 },
		ReformRefusals: func() map[string]int64 { return map[string]int64{"signature": 40, "host": 0} }})
	for i := range 3 {
		sent += 1000
		stale.Add(int64(i))
		w.Step(worker.StepTimes{Step: 10 * time.Millisecond, Compute: 6 * time.Millisecond, Push: 3 * time.Millisecond, Samples: 64})
	}
	fams := scrape(t, reg)
	rank := map[string]string{"rank": "3"}
	assert.Equal(t, 3.0, value(fams, "shoal_worker_steps_total", rank))
	assert.Equal(t, 192.0, value(fams, "shoal_worker_samples_total", rank))
	assert.Equal(t, 3.0, value(fams, "shoal_worker_phase_seconds", map[string]string{"rank": "3", "phase": "compute"}))
	assert.Equal(t, 3000.0, value(fams, "shoal_worker_sent_bytes_total", rank))
	assert.Equal(t, 6000.0, value(fams, "shoal_worker_received_bytes_total", rank))
	assert.Equal(t, 3.0, value(fams, "shoal_worker_push_staleness_steps", rank))
	assert.Equal(t, 5.0, value(fams, "shoal_members", rank))
	assert.Equal(t, 40.0, value(fams, "shoal_elastic_refused_reforms_total", map[string]string{"rank": "3", "reason": "signature"}))
	assert.Equal(t, 0.0, value(fams, "shoal_elastic_refused_reforms_total", map[string]string{"rank": "3", "reason": "host"}))
	assert.True(t, math.IsNaN(value(fams, "shoal_worker_dropped_pushes_total", rank)), "no source, not exported")
	var compute *dto.Histogram
	for _, m := range fams["shoal_worker_phase_seconds"].Metric {
		for _, l := range m.Label {
			if l.GetName() == "phase" && l.GetValue() == "compute" {
				compute = m.Histogram
			}
		}
	}
	require.NotNil(t, compute)
	assert.InDelta(t, 0.018, compute.GetSampleSum(), 1e-9)
}

func TestTheEndpointServesOnlyMetrics(t *testing.T) {
	srv, err := metrics.Listen("127.0.0.1:0", metrics.NewRegistry(), nil)
	require.NoError(t, err)
	defer func() { assert.NoError(t, srv.Close()) }()
	resp, err := http.Get("http://" + srv.Addr() + "/debug/pprof/")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	_, err = metrics.Listen(srv.Addr(), metrics.NewRegistry(), nil)
	assert.ErrorContains(t, err, "metrics: listening on "+srv.Addr())
}

// TestAShardsOuterStepsAsPrometheusReadsThem: a shard of local steps
// exports its outer steps and the bytes of the pseudo-gradients it took
// (not those of a refused or a duplicate push); a shard of gradients
// exports neither.
func TestAShardsOuterStepsAsPrometheusReadsThem(t *testing.T) {
	var l nn.Layout
	l.Add("w", 8)
	plan, err := shard.New(l.Size(), 1, 2*4)
	require.NoError(t, err)
	reg := metrics.NewRegistry()
	m := metrics.NewPS(reg, 0)
	s, err := ps.New(ps.Config{Mode: consistency.Sync, Workers: 2, LocalSteps: 4, Plan: plan, Layout: l, Optimizer: optim.DefaultConfig()}, make([]float32, 8))
	require.NoError(t, err)
	defer s.Close()
	m.Attach(s)
	sessions := map[int64]ps.Session{}
	for w := range int64(2) {
		j, err := s.Join(w, 0, 1)
		require.NoError(t, err)
		sessions[w] = j.Session
	}
	push := func(w, round int64, g float32, bytes int64) error {
		grads := make([]float32, 8)
		grads[0] = g
		_, err := s.Push(context.Background(), ps.Push{WorkerID: w, Session: sessions[w], Step: round, Clock: round, Ranges: s.Ranges(), Grads: grads, Bytes: bytes})
		return err
	}
	require.NoError(t, push(0, 0, 1, 12))
	require.Error(t, push(1, 0, float32(math.NaN()), 1000), "refused: not counted")
	require.NoError(t, push(1, 0, 1, 12))
	require.NoError(t, push(0, 1, 1, 40))
	res, err := s.Push(context.Background(), ps.Push{WorkerID: 0, Session: sessions[0], Step: 1, Clock: 1, Ranges: s.Ranges(), Grads: make([]float32, 8), Bytes: 1000})
	require.NoError(t, err)
	require.True(t, res.Duplicate, "a duplicate: not counted")
	require.NoError(t, push(1, 1, 1, 40))

	fams := scrape(t, reg)
	shard0 := map[string]string{"shard": "0"}
	assert.Equal(t, 2.0, value(fams, "shoal_ps_outer_steps_total", shard0), "two rounds")
	assert.Equal(t, 104.0, value(fams, "shoal_ps_pseudo_gradient_bytes_total", shard0))

	reg2 := metrics.NewRegistry()
	m2 := metrics.NewPS(reg2, 0)
	g, err := ps.New(ps.Config{Mode: consistency.Sync, Workers: 2, Plan: plan, Layout: l, Optimizer: optim.DefaultConfig()}, make([]float32, 8))
	require.NoError(t, err)
	defer g.Close()
	m2.Attach(g)
	fams = scrape(t, reg2)
	assert.Nil(t, fams["shoal_ps_outer_steps_total"], "no outer steps without local steps")
	assert.Nil(t, fams["shoal_ps_pseudo_gradient_bytes_total"])
}
