package worker_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/client"
	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/internal/testcluster"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
	"github.com/shoalml/shoal/ps"
	"github.com/shoalml/shoal/shard"
	"github.com/shoalml/shoal/worker"
	"github.com/shoalml/shoal/worker/psclient"
)

// A tiny model for the streaming tests: a vector of n floats whose loss
// for worker w is ½‖θ − c_w‖², so its gradient is θ − c_w, with targets
// that differ per worker and per float. The tests drive the strategy as
// worker.Worker does (Params, then Apply, every step) and compare with a
// reference of the staggered schedule computed here by hand.
const tinyN = 16

func target(w, i int) float32 { return float32((w+1)*(i%5)) - 1.5 }

func tinyGrad(w int, theta, g []float32) {
	for i := range theta {
		g[i] = theta[i] - target(w, i)
	}
}

// streamRun is a synchronous run of the tiny model: workers workers
// through servers shards in chunks of chunk floats, H local steps of SGD
// at lr 0.1, outer on the shards, in fragments as cfg says (Fragments 0:
// worker.Local instead).
type streamRun struct {
	async                   bool // async shards (outer SGD, update rule average) and worker.Async
	workers, servers, chunk int
	steps                   int64
	cfg                     worker.StreamConfig
	outer                   optim.Config
	cores                   []*ps.Server
	exchanges               [][]worker.Exchange
}

func (r *streamRun) initial() []float32 {
	v := make([]float32, tinyN)
	for i := range v {
		v[i] = float32(i) / 4
	}
	return v
}

func (r *streamRun) run(t *testing.T) []float32 {
	t.Helper()
	var l nn.Layout
	l.Add("w", tinyN)
	cfg := ps.DefaultConfig()
	cfg.Mode, cfg.Workers, cfg.LocalSteps, cfg.Fragments, cfg.Optimizer = consistency.Sync, r.workers, r.cfg.LocalSteps, r.cfg.Fragments, r.outer
	if r.async {
		cfg.Mode, cfg.Update.Rule = consistency.Async, ps.UpdateAverage
	}
	r.cores = testcluster.CoresWith(t, cfg, l, r.initial(), r.servers, r.chunk)
	c := testcluster.Start(t, r.cores...)
	inner := optim.DefaultConfig()
	inner.Algorithm, inner.LR = optim.SGD, 0.1

	r.exchanges = make([][]worker.Exchange, r.workers)
	errs := make(chan error, r.workers)
	for w := range r.workers {
		go func() {
			errs <- func() error {
				cl, err := client.Dial(ctxT(t), c.Addrs(), client.WithDialOptions(c.DialOption()))
				if err != nil {
					return err
				}
				defer cl.Close()
				opt, err := optim.New(inner, tinyN)
				if err != nil {
					return err
				}
				var s worker.Strategy
				var st *worker.Streaming
				if r.cfg.Fragments == 0 {
					if s, err = worker.NewLocal(worker.NewSync(psclient.New(cl), int64(w), r.servers), opt, r.cfg.LocalSteps); err != nil {
						return err
					}
				} else {
					fs := worker.NewFragmentServers(psclient.New(cl))
					var inner worker.Strategy = worker.NewSync(fs, int64(w), r.servers)
					if r.async {
						if inner, err = worker.NewAsync(fs, tinyN, r.servers, worker.AsyncConfig{WorkerID: int64(w)}); err != nil {
							return err
						}
					}
					if st, err = worker.NewStreaming(inner, fs, opt, cl.Info().Plan, r.cfg); err != nil {
						return err
					}
					st.Record, s = true, st
				}
				ctx := ctxT(t)
				s.(worker.LastStepper).SetLastStep(r.steps - 1)
				theta, g := make([]float32, tinyN), make([]float32, tinyN)
				for step := range r.steps {
					if err := s.Params(ctx, step, theta); err != nil {
						return fmt.Errorf("worker %d, step %d: %w", w, step, err)
					}
					tinyGrad(w, theta, g)
					if err := s.Apply(ctx, step, theta, g); err != nil {
						return fmt.Errorf("worker %d, step %d: %w", w, step, err)
					}
				}
				if err := s.Finish(ctx); err != nil {
					return err
				}
				if st != nil {
					r.exchanges[w] = st.Exchanges
				}
				return nil
			}()
		}()
	}
	for range r.workers {
		require.NoError(t, <-errs)
	}
	cl, err := client.Dial(ctxT(t), c.Addrs(), client.WithDialOptions(c.DialOption()))
	require.NoError(t, err)
	defer cl.Close()
	final := make([]float32, tinyN)
	_, err = cl.Pull(ctxT(t), final)
	require.NoError(t, err)
	return final
}

// reference is the staggered schedule by hand, in one goroutine: every
// worker's SGD steps; after step t with t+1 a multiple of P = H/F (or
// the last step), exchange e = ⌊t/P⌋ of fragment e mod F: each worker's
// pseudo-gradient anchor_f − θ_f, their mean through the outer optimizer
// (Nesterov or SGD, written out here, one momentum buffer per float, so
// per fragment), and, but on the last step, the global fragment that
// each worker merges before step t+τ+1: θ_f ← α·θ_f + (1−α)·θ̃_f, and
// θ̃_f becomes its anchor. F = 1, τ = 0, α = 0 is DiLoCo.
func (r *streamRun) reference(plan shard.Plan) []float32 {
	h, f := r.cfg.LocalSteps, max(r.cfg.Fragments, 1)
	p, tau, alpha := int64(h/f), int64(r.cfg.Overlap), float32(r.cfg.Mix)
	global := r.initial()
	mom := make([]float32, tinyN)
	theta, anchor, pulled := make([][]float32, r.workers), make([][]float32, r.workers), make([][]float32, r.workers)
	for w := range r.workers {
		theta[w], anchor[w], pulled[w] = append([]float32(nil), global...), append([]float32(nil), global...), make([]float32, tinyN)
	}
	frag := func(i int) shard.Range {
		if f == 1 {
			return shard.Range{Off: 0, Len: tinyN}
		}
		rg, err := plan.Fragment(f, i)
		if err != nil {
			panic(err)
		}
		return rg
	}
	pending, mergeAt := -1, int64(0)
	merge := func() {
		rg := frag(pending)
		for w := range r.workers {
			for i := rg.Off; i < rg.End(); i++ {
				theta[w][i] = alpha*theta[w][i] + (1-alpha)*pulled[w][i]
				anchor[w][i] = pulled[w][i]
			}
		}
		pending = -1
	}
	g := make([]float32, tinyN)
	lr, mu := float32(r.outer.LR), float32(r.outer.Momentum)
	for step := range r.steps {
		if pending >= 0 && step >= mergeAt {
			merge()
		}
		for w := range r.workers {
			tinyGrad(w, theta[w], g)
			for i := range g {
				theta[w][i] -= float32(0.1) * g[i]
			}
		}
		last := step == r.steps-1
		if (step+1)%p != 0 && !last {
			continue
		}
		if pending >= 0 {
			merge()
		}
		fi := int((step / p) % int64(f))
		rg := frag(fi)
		for i := rg.Off; i < rg.End(); i++ {
			var sum float32
			for w := range r.workers {
				sum += anchor[w][i] - theta[w][i]
			}
			d := sum * (1 / float32(r.workers))
			switch r.outer.Algorithm {
			case optim.Nesterov:
				mom[i] = mu*mom[i] + d
				global[i] -= lr * (d + mu*mom[i])
			default:
				global[i] -= lr * d
			}
		}
		if last {
			break
		}
		for w := range r.workers {
			copy(pulled[w][rg.Off:rg.End()], global[rg.Off:rg.End()])
		}
		pending, mergeAt = fi, step+1+tau
		if tau == 0 {
			merge()
		}
	}
	return global
}

func nesterov() optim.Config {
	c := optim.DefaultConfig()
	c.Algorithm, c.LR, c.Momentum = optim.Nesterov, 0.7, 0.9
	return c
}

// TestStreamingSyncMatchesTheStaggeredSchedule: two sync workers of the
// tiny model over two shards (8 chunks of 2 floats, 4 rows) with H = 4
// end where the hand-computed reference of the staggered schedule does,
// for F = 2 and 4, with and without overlap and with each merge. The
// reference of another schedule (whole-vector DiLoCo, or the other
// merge) is off by more than ten times the tolerance, so the comparison
// can tell them apart.
func TestStreamingSyncMatchesTheStaggeredSchedule(t *testing.T) {
	plan, err := shard.New(tinyN, 2, 8)
	require.NoError(t, err)
	cases := []struct {
		name string
		cfg  worker.StreamConfig
	}{
		{"F=2 τ=1 α=0.5", worker.StreamConfig{LocalSteps: 4, Fragments: 2, Overlap: 1, Mix: 0.5}},
		{"F=2 τ=1 α=0", worker.StreamConfig{LocalSteps: 4, Fragments: 2, Overlap: 1, Mix: 0}},
		{"F=2 τ=0 α=0", worker.StreamConfig{LocalSteps: 4, Fragments: 2, Overlap: 0, Mix: 0}},
		{"F=4 τ=0 α=0.5", worker.StreamConfig{LocalSteps: 4, Fragments: 4, Overlap: 0, Mix: 0.5}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &streamRun{workers: 2, servers: 2, chunk: 2, steps: 23, cfg: tc.cfg, outer: nesterov()}
			got := r.run(t)
			want := r.reference(plan)
			e := testcluster.RelErr(got, want)
			t.Logf("relative error against the reference %.2e", e)
			assert.LessOrEqual(t, e, 1e-5)

			diloco := &streamRun{workers: 2, steps: 23, cfg: worker.StreamConfig{LocalSteps: 4, Fragments: 1}, outer: nesterov()}
			// Ten times the tolerance above: the comparison tells the
			// schedules apart.
			ed := testcluster.RelErr(got, diloco.reference(plan))
			t.Logf("against whole-vector DiLoCo's reference %.2e", ed)
			assert.Greater(t, ed, 1e-4, "whole-vector DiLoCo ends elsewhere")
			other := *r
			other.cfg.Mix = 0.5 - tc.cfg.Mix
			if tc.cfg.Overlap > 0 {
				eo := testcluster.RelErr(got, other.reference(plan))
				t.Logf("against the reference with mix %g %.2e", other.cfg.Mix, eo)
				assert.Greater(t, eo, 1e-4, "the other merge ends elsewhere")
			}
		})
	}
}

// TestStreamingPushesEachFragmentAtItsOffset: with F = 2 and 4 (H = 8,
// 32 steps) each worker exchanges fragment f after the steps t with
// t+1 = (f+1)·H/F + k·H, once per H steps, and every shard takes pushes
// of exactly its floats of that fragment: its PushBytes are the sum over
// the exchanges of 4 bytes a float of the fragment's share.
func TestStreamingPushesEachFragmentAtItsOffset(t *testing.T) {
	for _, f := range []int{2, 4} {
		t.Run(fmt.Sprintf("F=%d", f), func(t *testing.T) {
			const h, steps = 8, 32
			cfg := worker.DefaultStreamConfig(h, f)
			r := &streamRun{workers: 2, servers: 2, chunk: 2, steps: steps, cfg: cfg, outer: nesterov()}
			r.run(t)
			p := int64(h / f)
			var want []worker.Exchange
			for step := range int64(steps) {
				if (step+1)%p == 0 {
					want = append(want, worker.Exchange{Step: step, Fragment: int((step / p) % int64(f))})
				}
			}
			perFrag := map[int]int{}
			for _, e := range want {
				perFrag[e.Fragment]++
				assert.Equal(t, int64(0), (e.Step+1-int64(e.Fragment+1)*p)%h, "fragment %d at its offset", e.Fragment)
			}
			for i := range f {
				assert.Equal(t, steps/h, perFrag[i], "fragment %d once per H steps", i)
			}
			for w := range r.workers {
				assert.Equal(t, want, r.exchanges[w], "worker %d's exchanges", w)
			}
			plan := r.cores[0].Config().Plan
			for s, core := range r.cores {
				var bytes int64
				for _, e := range want {
					rg, err := plan.Fragment(f, e.Fragment)
					require.NoError(t, err)
					for _, c := range core.Ranges() {
						if c.Off >= rg.Off && c.End() <= rg.End() {
							bytes += int64(4 * c.Len * r.workers)
						}
					}
				}
				st := core.Stats()
				assert.Equal(t, int64(len(want)*r.workers), st.Pushes, "shard %d: one push a worker an exchange", s)
				assert.Equal(t, bytes, st.PushBytes, "shard %d: each push carries its fragment's floats alone", s)
				assert.Less(t, st.PushBytes, int64(len(want)*r.workers*4*core.Floats()), "shard %d: less than whole pushes", s)
				assert.Equal(t, int64(len(want)), core.Clock(), "shard %d: its clock counts exchanges", s)
			}
		})
	}
}

// TestStreamingOneFragmentIsLocal: one fragment without overlap, taking
// the pulled weights whole, is today's local steps (worker.Local): three
// sync workers over two shards with a short last round (50 = 12·4 + 2)
// end at the same weights, within the float32 reordering of the shards'
// sums of three pushes.
func TestStreamingOneFragmentIsLocal(t *testing.T) {
	plan, err := shard.New(tinyN, 2, 8)
	require.NoError(t, err)
	local := &streamRun{workers: 3, servers: 2, chunk: 2, steps: 50, cfg: worker.StreamConfig{LocalSteps: 4}, outer: nesterov()}
	want := local.run(t)
	stream := &streamRun{workers: 3, servers: 2, chunk: 2, steps: 50, cfg: worker.StreamConfig{LocalSteps: 4, Fragments: 1}, outer: nesterov()}
	got := stream.run(t)
	e := testcluster.RelErr(got, want)
	t.Logf("relative error against worker.Local %.2e", e)
	assert.LessOrEqual(t, e, 1e-6)
	ref := stream.reference(plan)
	t.Logf("against the reference %.2e", testcluster.RelErr(got, ref))
	for s := range local.cores {
		assert.Equal(t, local.cores[s].Stats().PushBytes, stream.cores[s].Stats().PushBytes, "shard %d: the same bytes", s)
		assert.Equal(t, int64(13), stream.cores[s].Clock(), "shard %d: 13 rounds", s)
	}
}

// TestStreamConfigRefusesBadInput: a fragment index out of range, and
// fragments that do not fit the local steps or the plan, are refused
// saying what was expected.
func TestStreamConfigRefusesBadInput(t *testing.T) {
	plan, err := shard.New(tinyN, 2, 8) // 4 rows
	require.NoError(t, err)
	cases := []struct {
		name string
		cfg  worker.StreamConfig
		want string
	}{
		{"more fragments than steps", worker.StreamConfig{LocalSteps: 2, Fragments: 4}, "want 1..2"},
		{"not a divisor", worker.StreamConfig{LocalSteps: 6, Fragments: 4}, "want a divisor of the local steps"},
		{"overlap too long", worker.StreamConfig{LocalSteps: 4, Fragments: 2, Overlap: 2}, "overlap of 2 steps: want 0..1"},
		{"mix", worker.StreamConfig{LocalSteps: 4, Fragments: 2, Mix: 1.5}, "mix 1.5: want 0..1"},
		{"more fragments than rows", worker.StreamConfig{LocalSteps: 8, Fragments: 8}, "want at least 8 chunks per server"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opt, err := optim.New(optim.DefaultConfig(), tinyN)
			require.NoError(t, err)
			_, err = worker.NewStreaming(nil, worker.NewFragmentServers(nil), opt, plan, tc.cfg)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	opt, err := optim.New(optim.DefaultConfig(), tinyN)
	require.NoError(t, err)
	s, err := worker.NewStreaming(nil, worker.NewFragmentServers(nil), opt, plan, worker.StreamConfig{LocalSteps: 4, Fragments: 2})
	require.NoError(t, err)
	for _, f := range []int{-1, 2} {
		_, err := s.Fragment(f)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "want 0..1 (2 fragments)")
	}
	r, err := s.Fragment(1)
	require.NoError(t, err)
	assert.Equal(t, shard.Range{Off: 8, Len: 8}, r)
}

// TestAsyncStreamingAppliesEveryFragment: async shards apply each
// worker's fragment as it arrives: two workers of 4 fragments (H = 8, 32
// steps, one step overlapped) make 2·16 exchanges, every shard applies
// all of them and refuses none, and the weights move.
func TestAsyncStreamingAppliesEveryFragment(t *testing.T) {
	outer := optim.DefaultConfig()
	outer.Algorithm, outer.LR = optim.SGD, 1
	r := &streamRun{async: true, workers: 2, servers: 2, chunk: 2, steps: 32, cfg: worker.DefaultStreamConfig(8, 4), outer: outer}
	got := r.run(t)
	for s, core := range r.cores {
		st := core.Stats()
		assert.Equal(t, int64(2*16), core.Clock(), "shard %d applied every exchange", s)
		assert.Zero(t, st.Rejected, "shard %d refused nothing: %v", s, st.RejectedBy)
	}
	assert.Greater(t, testcluster.RelErr(got, r.initial()), 0.1, "the weights moved")
	for w := range r.workers {
		assert.Len(t, r.exchanges[w], 16, "worker %d: an exchange every 2 steps", w)
	}
}
