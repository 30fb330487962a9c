package worker_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/client"
	"github.com/shoalml/shoal/collective"
	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/data"
	"github.com/shoalml/shoal/internal/testcluster"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
	"github.com/shoalml/shoal/ps"
	"github.com/shoalml/shoal/worker"
	"github.com/shoalml/shoal/worker/psclient"
)

// runHosts is runPS with the workers grouped perHost to a host (ranks
// h·perHost … h·perHost+perHost−1 on host h), each host pushing once
// through a worker.HostGroup over an in-memory group: the shards count
// hosts. It returns the final vector and the shards' clocks.
func runHosts(t *testing.T, mode consistency.Mode, staleness int64, workers, perHost, servers, batch int, steps int64, train data.Dataset) ([]float32, []int64) {
	t.Helper()
	spec := nn.Spec{Arch: "mlp", Hidden: []int{24}}
	model, err := nn.New(spec, nn.NewCPU())
	require.NoError(t, err)
	initial := make([]float32, model.Layout().Size())
	model.Init(initial, 7)
	hosts := workers / perHost
	cfg := ps.DefaultConfig()
	cfg.Mode, cfg.Workers, cfg.Staleness = mode, hosts, staleness
	cfg.Optimizer = optim.DefaultConfig()
	cfg.Optimizer.Algorithm, cfg.Optimizer.LR = optim.SGD, 0.1
	c := testcluster.Start(t, testcluster.CoresWith(t, cfg, model.Layout(), initial, servers, 2000)...)

	errs := make(chan error, workers)
	for h := range hosts {
		group := collective.NewMemGroup(perHost)
		members := make([]int, perHost)
		for i := range members {
			members[i] = h*perHost + i
		}
		for i, r := range members {
			go func() {
				errs <- func() error {
					defer group[i].Close()
					comm, err := collective.New(group[i], collective.DefaultConfig())
					if err != nil {
						return err
					}
					var servers worker.ParameterServers
					if i == 0 {
						cl, err := client.Dial(ctxT(t), c.Addrs(), client.WithDialOptions(c.DialOption()))
						if err != nil {
							return err
						}
						defer cl.Close()
						servers = psclient.New(cl)
					}
					hg, err := worker.NewHostGroup(servers, comm, worker.HostGroupConfig{Host: int64(h), Workers: members, Shards: len(c.Addrs())})
					if err != nil {
						return err
					}
					m, _ := nn.New(spec, nn.NewCPU())
					var s worker.Strategy = worker.NewSync(hg, int64(r), len(c.Addrs()))
					if mode != consistency.Sync {
						if s, err = worker.NewAsync(hg, m.Layout().Size(), len(c.Addrs()), worker.AsyncConfig{WorkerID: int64(r)}); err != nil {
							return err
						}
					}
					w, err := worker.New(worker.Config{Rank: r, WorldSize: workers, Batch: batch, Steps: steps, Seed: 11}, m, train, s)
					if err != nil {
						return err
					}
					defer w.Close()
					_, err = w.Run(ctxT(t))
					return err
				}()
			}()
		}
	}
	for range workers {
		require.NoError(t, <-errs)
	}
	cl, err := client.Dial(ctxT(t), c.Addrs(), client.WithDialOptions(c.DialOption()))
	require.NoError(t, err)
	defer cl.Close()
	final := make([]float32, model.Layout().Size())
	clocks, err := cl.Pull(ctxT(t), final)
	require.NoError(t, err)
	return final, clocks
}

// TestHostGroupSyncEquivalence: 2 hosts of 2 workers, each host pushing
// its workers' mean, end where 4 workers pushing alone end: the mean of
// the hosts' means is the mean of the 4 gradients.
func TestHostGroupSyncEquivalence(t *testing.T) {
	cfg := data.DefaultSyntheticConfig()
	cfg.Train, cfg.Test = 2400, 10
	train, _, err := data.Synthetic(cfg)
	require.NoError(t, err)
	const b, steps = 12, 40
	for _, s := range []int{1, 2} {
		t.Run(fmt.Sprintf("S=%d", s), func(t *testing.T) {
			want := runPS(t, consistency.Sync, 0, 4, s, b, steps, train)
			got, clocks := runHosts(t, consistency.Sync, 0, 4, 2, s, b, steps, train)
			for _, c := range clocks {
				require.Equal(t, int64(steps), c, "every shard applied each step once")
			}
			e := testcluster.RelErr(got, want)
			t.Logf("relative error %.2e", e)
			assert.LessOrEqual(t, e, 1e-5)
		})
	}
}

// TestHostGroupAsyncAndSSP: async and SSP runs of 2 hosts × 2 workers
// complete, and the shards count one push a step per host, not per
// worker.
func TestHostGroupAsyncAndSSP(t *testing.T) {
	cfg := data.DefaultSyntheticConfig()
	cfg.Train, cfg.Test = 1200, 10
	train, _, err := data.Synthetic(cfg)
	require.NoError(t, err)
	const hosts, steps = 2, 20
	for _, tc := range []struct {
		name      string
		mode      consistency.Mode
		staleness int64
	}{{"async", consistency.Async, 0}, {"ssp", consistency.SSP, 2}} {
		t.Run(tc.name, func(t *testing.T) {
			final, clocks := runHosts(t, tc.mode, tc.staleness, 4, 2, 2, 8, steps, train)
			require.NotEmpty(t, final)
			for _, c := range clocks {
				assert.Equal(t, int64(hosts*steps), c, "one update per host and step")
			}
		})
	}
}

// fakeServers answers every call at once with zero clocks, or fails
// pushes with failPush.
type fakeServers struct {
	shards   int
	failPush error
}

func (f fakeServers) Pull(_ context.Context, _ worker.PullArgs, _ []float32) ([]int64, error) {
	return make([]int64, f.shards), nil
}

func (f fakeServers) Push(_ context.Context, _ worker.PushArgs) (worker.PushResult, error) {
	return worker.PushResult{Clocks: make([]int64, f.shards), Staleness: make([]int64, f.shards)}, f.failPush
}

func (f fakeServers) PushPull(_ context.Context, args worker.PushPullArgs) (worker.PushPullResult, error) {
	res, err := f.Push(context.Background(), args.PushArgs)
	return worker.PushPullResult{PushResult: res, PullClocks: make([]int64, f.shards)}, err
}

// TestHostGroupFailures: a member that died is named by its rank in the
// leader's error, and a leader whose push fails is named in its
// members' errors.
func TestHostGroupFailures(t *testing.T) {
	dataCfg := data.DefaultSyntheticConfig()
	dataCfg.Train, dataCfg.Test = 400, 10
	train, _, err := data.Synthetic(dataCfg)
	require.NoError(t, err)
	spec := nn.Spec{Arch: "mlp", Hidden: []int{8}}
	members := []int{4, 5}
	run := func(i int, tr collective.Transport, srv worker.ParameterServers) error {
		comm, err := collective.New(tr, collective.DefaultConfig())
		require.NoError(t, err)
		hg, err := worker.NewHostGroup(srv, comm, worker.HostGroupConfig{Host: 2, Workers: members, Shards: 1})
		require.NoError(t, err)
		m, _ := nn.New(spec, nn.NewCPU())
		w, err := worker.New(worker.Config{Rank: members[i], WorldSize: 6, Batch: 8, Steps: 5, Seed: 11}, m, train, worker.NewSync(hg, int64(members[i]), 1))
		require.NoError(t, err)
		defer w.Close()
		_, err = w.Run(ctxT(t))
		return err
	}

	t.Run("a member dies", func(t *testing.T) {
		group := collective.NewMemGroup(2)
		require.NoError(t, group[1].Close()) // worker 5 is gone
		defer group[0].Close()
		err := run(0, group[0], fakeServers{shards: 1})
		require.Error(t, err)
		assert.ErrorIs(t, err, collective.ErrPeer)
		assert.Contains(t, err.Error(), "host 2: worker 5 of the host's group")
	})

	t.Run("the leader's push fails", func(t *testing.T) {
		group := collective.NewMemGroup(2)
		boom := errors.New("shard 0 refused the push")
		errs := make(chan error, 2)
		for i := range 2 {
			go func() {
				defer group[i].Close()
				var srv worker.ParameterServers
				if i == 0 {
					srv = fakeServers{shards: 1, failPush: boom}
				}
				errs <- run(i, group[i], srv)
			}()
		}
		for range 2 {
			err := <-errs
			require.Error(t, err)
			if errors.Is(err, boom) {
				continue // the leader's own
			}
			assert.ErrorIs(t, err, worker.ErrLeaderFailed)
			assert.Contains(t, err.Error(), "(worker 4)")
		}
	})
}

func TestNewHostGroupRefuses(t *testing.T) {
	group := collective.NewMemGroup(2)
	defer group[0].Close()
	defer group[1].Close()
	comm, err := collective.New(group[0], collective.DefaultConfig())
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		srv  worker.ParameterServers
		cfg  worker.HostGroupConfig
		want string
	}{
		{"workers unlike ranks", fakeServers{shards: 1}, worker.HostGroupConfig{Workers: []int{0}, Shards: 1}, "the communicator has 2 ranks, Workers names 1"},
		{"no shards", fakeServers{shards: 1}, worker.HostGroupConfig{Workers: []int{0, 1}}, "0 shards: want >= 1"},
		{"leader without servers", nil, worker.HostGroupConfig{Workers: []int{0, 1}, Shards: 1}, "the leader (worker 0) has no parameter servers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := worker.NewHostGroup(tc.srv, comm, tc.cfg)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
