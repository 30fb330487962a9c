//go:build cgo

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/launch"
	"github.com/shoalml/shoal/node"
	"github.com/shoalml/shoal/optim"
	"github.com/shoalml/shoal/ps"
	"github.com/shoalml/shoal/rpc"
	"github.com/shoalml/shoal/secure"
	"github.com/shoalml/shoal/shard"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// systemPython is the Python with Debian's python3-torch.
const systemPython = "/usr/bin/python3"

// needTorch skips t, saying what is missing, unless /usr/bin/python3 can
// import torch, numpy and the extra modules; with SHOAL_REQUIRE_PYTHON=1 it
// fails t instead.
func needTorch(t *testing.T, extra ...string) {
	t.Helper()
	var missing []string
	if _, err := os.Stat(systemPython); err != nil {
		missing = []string{systemPython}
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, m := range append([]string{"torch", "numpy"}, extra...) {
			probe := fmt.Sprintf("import importlib.util, sys; sys.exit(importlib.util.find_spec(%q) is None)", m)
			if exec.CommandContext(ctx, systemPython, "-c", probe).Run() != nil {
				missing = append(missing, m)
			}
		}
	}
	if len(missing) == 0 {
		return
	}
	pkgs := "python3-torch python3-numpy"
	for _, m := range extra {
		pkgs += " python3-" + m
	}
	msg := fmt.Sprintf("%s lacks %s (apt-get install %s)", systemPython, strings.Join(missing, ", "), pkgs)
	if os.Getenv("SHOAL_REQUIRE_PYTHON") == "1" {
		t.Fatalf("SHOAL_REQUIRE_PYTHON=1, but %s", msg)
	}
	t.Skipf("SKIP: %s; SHOAL_REQUIRE_PYTHON=1 makes this a failure", msg)
}

var (
	buildOnce sync.Once
	libPath   string
	buildErr  error
)

// library builds this package with -buildmode=c-shared, once per test
// binary, and returns the .so's path.
func library(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "libshoal-test-")
		if err != nil {
			buildErr = err
			return
		}
		libPath = filepath.Join(dir, "libshoal.so")
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, "go", "build", "-buildmode=c-shared", "-o", libPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build -buildmode=c-shared: %v\n%s", err, out)
		}
	})
	require.NoError(t, buildErr)
	return libPath
}

// freeAddr returns a loopback address with a port that was free a moment
// ago, for rank 0's rendezvous.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// rankResult is what one Python rank did.
type rankResult struct {
	out    map[string]any
	raw    string
	stderr string
	code   int
	// elapsed is from the start of all ranks to this one's exit.
	elapsed time.Duration
}

// runRanks starts n ranks of testdata/hvd_worker.py with args, as a
// launcher would (SHOAL_* variables, loopback master, a collective
// timeout of 90 s), and waits for all of them, at most deadline.
func runRanks(t *testing.T, n int, deadline time.Duration, args ...string) []rankResult {
	t.Helper()
	return runRanksEnv(t, n, deadline, nil, args...)
}

// runRanksEnv is runRanks with more environment variables for every rank.
func runRanksEnv(t *testing.T, n int, deadline time.Duration, env []string, args ...string) []rankResult {
	t.Helper()
	return runScript(t, n, deadline, env, "testdata/hvd_worker.py", args...)
}

// runScript is runRanksEnv with another Python script for every rank.
func runScript(t *testing.T, n int, deadline time.Duration, env []string, script string, args ...string) []rankResult {
	t.Helper()
	lib := library(t)
	pyPath, err := filepath.Abs("../../clients/python")
	require.NoError(t, err)
	master := freeAddr(t)
	ctx, cancel := context.WithTimeout(t.Context(), deadline)
	defer cancel()
	res := make([]rankResult, n)
	var wg sync.WaitGroup
	start := time.Now()
	for r := range n {
		cmd := exec.CommandContext(ctx, systemPython, append([]string{script}, args...)...)
		cmd.Env = append(os.Environ(), "SHOAL_LIBRARY="+lib, "PYTHONPATH="+pyPath, "SHOAL_MASTER="+master,
			"SHOAL_RANK="+strconv.Itoa(r), "SHOAL_WORLD_SIZE="+strconv.Itoa(n), "SHOAL_LOCAL_RANK="+strconv.Itoa(r),
			"SHOAL_LOCAL_SIZE="+strconv.Itoa(n), "SHOAL_JOB_ID="+t.Name(), "SHOAL_COLLECTIVE_TIMEOUT=90", "OMP_NUM_THREADS=1")
		cmd.Env = append(cmd.Env, env...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		require.NoError(t, cmd.Start())
		wg.Go(func() {
			err := cmd.Wait()
			res[r] = rankResult{raw: stdout.String(), stderr: stderr.String(), code: cmd.ProcessState.ExitCode(), elapsed: time.Since(start)}
			if err != nil && res[r].code == 0 {
				res[r].code = -1
			}
			lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
			_ = json.Unmarshal([]byte(lines[len(lines)-1]), &res[r].out)
		})
	}
	wg.Wait()
	require.NoError(t, ctx.Err(), "the ranks did not finish within %v", deadline)
	return res
}

func floats(v any) []float64 {
	var out []float64
	switch x := v.(type) {
	case []any:
		for _, e := range x {
			out = append(out, floats(e)...)
		}
	case float64:
		out = append(out, x)
	}
	return out
}

// TestHorovodOps runs Horovod's collectives from 2 and 4 Python ranks and
// checks every rank's results.
func TestHorovodOps(t *testing.T) {
	needTorch(t)
	for _, n := range []int{2, 4} {
		t.Run(fmt.Sprintf("%d ranks", n), func(t *testing.T) {
			res := runRanks(t, n, 4*time.Minute, "ops")
			sumK := float64(n * (n + 1) / 2) // Σ (r+1)
			for r, rr := range res {
				require.Equal(t, 0, rr.code, "rank %d: %s\n%s", r, rr.raw, rr.stderr)
				o := rr.out
				assert.EqualValues(t, []any{float64(r), float64(n), float64(r), float64(n)}, []any{o["rank"], o["size"], o["local_rank"], o["local_size"]})
				var avg, sum, mx, mn []float64
				for i := range 6 {
					avg, sum = append(avg, float64(i)*sumK/float64(n)), append(sum, float64(i)*sumK)
					mx, mn = append(mx, float64(i*n)), append(mn, float64(i))
				}
				assert.InDeltaSlice(t, avg, floats(o["avg"]), 1e-5, "rank %d avg", r)
				assert.Equal(t, sum, floats(o["sum"]), "rank %d sum", r)
				assert.Equal(t, mx, floats(o["max"]), "rank %d max", r)
				assert.Equal(t, mn, floats(o["min"]), "rank %d min", r)
				assert.Equal(t, sum, floats(o["fp16"]), "rank %d fp16 compression (small integers are exact)", r)
				assert.Equal(t, sum, floats(o["half"]), "rank %d float16 tensor", r)
				f64 := 0.0
				for k := range n {
					f64 += 1e-17 * float64(k+1) // in rank order, as the ranks reduce it
				}
				assert.Equal(t, []float64{f64, float64(n)}, floats(o["f64"]), "rank %d float64 (exact)", r)
				assert.Equal(t, []float64{float64(int64(n)<<40 + int64(n*(n-1)/2))}, floats(o["i64"]), "rank %d int64 (exact)", r)
				assert.Equal(t, []float64{0.5 * float64(n), 0.5 * float64(n), 0.5 * float64(n)}, floats(o["scaled"]), "rank %d pre/postscale", r)
				rs := float64(n * (n - 1) / 2)
				assert.Equal(t, []float64{rs, rs, rs, rs}, floats(o["inplace"]), "rank %d in place", r)
				assert.Equal(t, []float64{rs, rs, rs, rs, rs, rs}, floats(o["strided"]), "rank %d non-contiguous", r)
				last := float64(n - 1)
				assert.Equal(t, []float64{last, last, last}, floats(o["bcast"]), "rank %d broadcast", r)
				var gather []float64
				for k := range n {
					for range 2 * (k + 1) {
						gather = append(gather, float64(k))
					}
				}
				assert.Equal(t, gather, floats(o["gather"]), "rank %d allgather of varying first dims", r)
				var a2a, a2aSplits []float64
				for k := range n {
					for range 2 * (r + 1) {
						a2a = append(a2a, float64(100*k+r))
					}
					a2aSplits = append(a2aSplits, float64(r+1))
				}
				assert.Equal(t, a2a, floats(o["alltoall"]), "rank %d alltoall", r)
				assert.Equal(t, a2aSplits, floats(o["alltoall_splits"]), "rank %d alltoall's received splits", r)
				lo, hi := 2*r+1, 2*r+3 // 2n+1 rows: rank 0 has one more
				if r == 0 {
					lo = 0
				}
				var scattered []float64
				for i := lo; i < hi; i++ {
					scattered = append(scattered, float64(i)*sumK)
				}
				assert.Equal(t, scattered, floats(o["reducescatter"]), "rank %d reducescatter", r)
				assert.Equal(t, map[string]any{"from": 0.0, "list": []any{1.0, 2.0}}, o["bobj"], "rank %d broadcast_object", r)
				var names []any
				for k := range n {
					names = append(names, fmt.Sprintf("rank%d", k))
				}
				assert.Equal(t, names, o["gobj"], "rank %d allgather_object", r)
				mm, _ := o["mismatch"].(string)
				assert.Contains(t, mm, `rank 0: allreduce "mismatch.0" float32[4]`, "rank %d", r)
				assert.Contains(t, mm, `rank 1: allreduce "mismatch.1" float32[5]`, "rank %d", r)
				assert.Equal(t, []float64{float64(n), float64(n)}, floats(o["after_mismatch"]), "rank %d: the ring works after a mismatch", r)
				assert.Contains(t, o["complex"], "complex64 are not supported", "rank %d", r)
			}
		})
	}
}

// TestHorovodOptimizerRingEquivalence trains a small model with SGD
// (momentum) through DistributedOptimizer: N ranks, each with a share of
// the batch, must end where one rank with the whole batch ends, with
// fusion buckets of one or several tensors and with gradients
// accumulated over backward passes.
func TestHorovodOptimizerRingEquivalence(t *testing.T) {
	needTorch(t)
	const batch = 32
	ref := runRanks(t, 1, 3*time.Minute, "train", strconv.Itoa(batch), "67108864", "1")
	require.Equal(t, 0, ref[0].code, "%s\n%s", ref[0].raw, ref[0].stderr)
	want := ref[0].out["params"].(map[string]any)
	// The model's 6 tensors are all contiguous, so each one's gradient
	// must end as a view into its bucket (no copy in or out), also when
	// zero_grad(set_to_none=True) drops the views every step.
	const tensors = 6
	tests := []struct {
		name        string
		ranks       int
		fusion      int
		passes      int
		env         []string
		wantBuckets float64
	}{
		{"2 ranks, one bucket", 2, 64 << 20, 1, nil, 1},
		{"2 ranks, a bucket per tensor or two, 2 backward passes per step", 2, 256, 2, nil, 4},
		{"4 ranks, small buckets", 4, 256, 1, nil, 4},
		{"2 ranks, zero_grad(set_to_none=True)", 2, 256, 1, []string{"ZERO_TO_NONE=1"}, 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := runRanksEnv(t, tc.ranks, 4*time.Minute, tc.env, "train", strconv.Itoa(batch), strconv.Itoa(tc.fusion), strconv.Itoa(tc.passes))
			for r, rr := range res {
				require.Equal(t, 0, rr.code, "rank %d: %s\n%s", r, rr.raw, rr.stderr)
				assert.Equal(t, tc.wantBuckets, rr.out["buckets"], "rank %d's fusion buckets", r)
				assert.Equal(t, float64(tensors), rr.out["grad_views"], "rank %d's gradients that are views into their buckets", r)
				assertParamsNear(t, want, rr.out["params"].(map[string]any), r)
			}
		})
	}
}

// assertParamsNear checks rank r's parameters against want: float32 sums
// in another order over 12 steps, relative error 1e-5, absolute 1e-6 near
// zero.
func assertParamsNear(t *testing.T, want, got map[string]any, r int) {
	t.Helper()
	for name, w := range want {
		wv, gv := floats(w), floats(got[name])
		require.Len(t, gv, len(wv), "rank %d %s", r, name)
		for i := range wv {
			assert.InDelta(t, wv[i], gv[i], math.Max(1e-5*math.Abs(wv[i]), 1e-6), "rank %d %s[%d]", r, name, i)
		}
	}
}

// TestHorovodRankDies kills one of three ranks mid-run: the others must
// fail with an error naming it, within the call deadline, not hang.
func TestHorovodRankDies(t *testing.T) {
	needTorch(t)
	const victim = 1
	res := runRanks(t, 3, 3*time.Minute, "die", strconv.Itoa(victim))
	assert.Equal(t, 7, res[victim].code, "the victim's exit")
	for r, rr := range res {
		if r == victim {
			continue
		}
		require.Equal(t, 3, rr.code, "rank %d should fail with a collective error: %s\n%s", r, rr.raw, rr.stderr)
		msg, _ := rr.out["error"].(string)
		assert.Contains(t, msg, fmt.Sprintf("rank %d", victim), "rank %d's error names the dead rank", r)
	}
}

// TestHorovodRankStalls stops one of three ranks (it goes on with its own
// work for a minute): the others must fail at the collective timeout,
// before it is back, rather than wait for it.
func TestHorovodRankStalls(t *testing.T) {
	needTorch(t)
	const victim = 1
	res := runRanksEnv(t, 3, 3*time.Minute, []string{"SHOAL_COLLECTIVE_TIMEOUT=15", "STALL_SECONDS=60"}, "stall", strconv.Itoa(victim))
	assert.Equal(t, 7, res[victim].code, "the stalled rank's exit")
	deadline := false
	for r, rr := range res {
		if r == victim {
			continue
		}
		require.Equal(t, 3, rr.code, "rank %d should fail with a collective error: %s\n%s", r, rr.raw, rr.stderr)
		assert.Less(t, rr.elapsed, res[victim].elapsed, "rank %d failed only after the stalled rank was back", r)
		msg, _ := rr.out["error"].(string)
		deadline = deadline || strings.Contains(msg, "deadline exceeded")
	}
	assert.True(t, deadline, "no rank failed at the deadline: %v", res)
}

// TestHorovodOptimizerOptions trains through DistributedOptimizer with
// fp16 compression (close to one rank of the whole batch, within what
// float16 gradients allow) and with AdaSum (not an average: the ranks must
// agree with each other exactly).
func TestHorovodOptimizerOptions(t *testing.T) {
	needTorch(t)
	const batch = "32"
	ref := runRanks(t, 1, 3*time.Minute, "train", batch, "67108864", "1")
	require.Equal(t, 0, ref[0].code, "%s\n%s", ref[0].raw, ref[0].stderr)
	want := ref[0].out["params"].(map[string]any)

	t.Run("fp16 compression", func(t *testing.T) {
		res := runRanks(t, 2, 4*time.Minute, "train", batch, "1024", "1", "fp16")
		for r, rr := range res {
			require.Equal(t, 0, rr.code, "rank %d: %s\n%s", r, rr.raw, rr.stderr)
			got := rr.out["params"].(map[string]any)
			worst := 0.0
			for name, w := range want {
				wv, gv := floats(w), floats(got[name])
				for i := range wv {
					// float16 gradients (11 bits) over 12 steps of
					// momentum: about 1e-2 relative at worst here.
					assert.InDelta(t, wv[i], gv[i], math.Max(3e-2*math.Abs(wv[i]), 3e-3), "rank %d %s[%d]", r, name, i)
					worst = math.Max(worst, math.Abs(wv[i]-gv[i])/math.Max(math.Abs(wv[i]), 1e-3))
				}
			}
			assert.Greater(t, worst, 1e-5, "rank %d: no difference from float32 gradients: was the compression used?", r)
		}
	})
	t.Run("adasum", func(t *testing.T) {
		res := runRanks(t, 2, 4*time.Minute, "train", batch, "1024", "1", "none", "adasum")
		for r, rr := range res {
			require.Equal(t, 0, rr.code, "rank %d: %s\n%s", r, rr.raw, rr.stderr)
		}
		assert.Equal(t, res[0].out["params"], res[1].out["params"], "the ranks' weights differ after AdaSum")
		assert.NotEqual(t, want, res[0].out["params"], "AdaSum gave the average's result")
	})
}

// startShards serves servers parameter-server shards in this process, in
// mode for workers workers, the way shoal run starts them for a PyTorch
// job: plain SGD at lr 1, no model until rank 0 writes it to the file
// whose path it returns, with the shards' addresses.
func startShards(t *testing.T, mode consistency.Mode, workers, servers int) ([]string, string) {
	t.Helper()
	return startShardsWith(t, mode, workers, servers, nil)
}

// startShardsWith is startShards with credentials (nil: plaintext).
func startShardsWith(t *testing.T, mode consistency.Mode, workers, servers int, creds *secure.Credentials) ([]string, string) {
	t.Helper()
	return startShardsConfig(t, mode, workers, servers, creds, nil)
}

// startShardsConfig is startShardsWith with each shard's config changed
// by tweak (nil: as shoal run makes it).
func startShardsConfig(t *testing.T, mode consistency.Mode, workers, servers int, creds *secure.Credentials, tweak func(*ps.Config)) ([]string, string) {
	t.Helper()
	addrs, initPath, _ := startShardsMetrics(t, mode, workers, servers, creds, tweak, false)
	return addrs, initPath
}

// startShardsMetrics is startShardsConfig, with each shard serving its
// Prometheus metrics when metrics is set, at the addresses it returns
// third, in shard order.
func startShardsMetrics(t *testing.T, mode consistency.Mode, workers, servers int, creds *secure.Credentials, tweak func(*ps.Config), metrics bool) ([]string, string, []string) {
	t.Helper()
	initPath := filepath.Join(t.TempDir(), "model")
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	addrs, metricsAddrs := make([]string, servers), make([]string, servers)
	for i := range servers {
		c := ps.DefaultConfig()
		c.Mode, c.Workers, c.Shard = mode, workers, i
		c.Optimizer = optim.DefaultConfig()
		c.Optimizer.Algorithm, c.Optimizer.LR, c.Optimizer.Momentum = "sgd", 1, 0
		if tweak != nil {
			tweak(&c)
		}
		cfg := node.ShardConfig{PS: c, Listen: "127.0.0.1:0", Drain: time.Second, StreamIdle: time.Minute, Limits: rpc.DefaultLimits,
			ExitWait: time.Minute, Events: true, Creds: creds, InitFrom: initPath, InitWait: 5 * time.Minute,
			PlanFor: func(floats int) (shard.Plan, error) { return shard.New(floats, servers, 256) }}
		if metrics {
			cfg.MetricsAddr = "127.0.0.1:0"
		}
		r, w := io.Pipe()
		wg.Go(func() {
			err := node.RunShard(ctx, cfg, w)
			w.CloseWithError(err)
			if err != nil && ctx.Err() == nil {
				t.Errorf("shard %d: %v", i, err)
			}
		})
		dec := json.NewDecoder(r)
		var ev launch.Event
		require.NoError(t, dec.Decode(&ev), "shard %d's first event", i)
		if metrics {
			require.Equal(t, launch.Metrics, ev.Event, "shard %d's first event", i)
			metricsAddrs[i] = ev.Addr
			require.NoError(t, dec.Decode(&ev), "shard %d's second event", i)
		}
		require.Equal(t, launch.Listening, ev.Event)
		addrs[i] = ev.Addr
		go io.Copy(io.Discard, io.MultiReader(dec.Buffered(), r)) // the shard's later events
	}
	return addrs, initPath, metricsAddrs
}

// scrapeSum is the sum over the shards at addrs of the Prometheus metric
// name (every series of it).
func scrapeSum(t *testing.T, addrs []string, name string) float64 {
	t.Helper()
	// No connection kept: goleak would find its goroutines.
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	var sum float64
	for _, a := range addrs {
		resp, err := c.Get("http://" + a + "/metrics")
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		found := false
		for line := range strings.Lines(string(body)) {
			if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
				continue
			}
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			require.NoError(t, err, "%s", line)
			sum += v
			found = true
		}
		require.True(t, found, "shard at %s exports no %s", a, name)
	}
	return sum
}

// psEnv is what shoal run gives each rank of a PS-mode job.
func psEnv(mode consistency.Mode, addrs []string, initPath string) []string {
	return []string{"SHOAL_MODE=" + mode.String(), "SHOAL_SERVERS=" + strings.Join(addrs, ","), "SHOAL_PS_INIT=" + initPath}
}

// TestHorovodOptimizerPSEquivalence runs the ring test's script on two
// sync shards: two ranks of batch b must end where one rank of batch 2b
// ends, as on the ring, since the shards apply the mean of the ranks'
// SGD-with-momentum updates and that update is linear in the gradient.
func TestHorovodOptimizerPSEquivalence(t *testing.T) {
	needTorch(t)
	const batch = 32
	ref := runRanks(t, 1, 3*time.Minute, "train", strconv.Itoa(batch), "67108864", "1")
	require.Equal(t, 0, ref[0].code, "%s\n%s", ref[0].raw, ref[0].stderr)
	want := ref[0].out["params"].(map[string]any)
	addrs, initPath := startShards(t, consistency.Sync, 2, 2)
	res := runRanksEnv(t, 2, 4*time.Minute, psEnv(consistency.Sync, addrs, initPath), "train", strconv.Itoa(batch), "67108864", "1")
	for r, rr := range res {
		require.Equal(t, 0, rr.code, "rank %d: %s\n%s", r, rr.raw, rr.stderr)
		stats := rr.out["ps"].(map[string]any)
		assert.Equal(t, 12.0, stats["steps"], "rank %d pushed every step", r)
		assert.Equal(t, 0.0, rr.out["buckets"], "rank %d: no ring buckets on the parameter servers", r)
		assertParamsNear(t, want, rr.out["params"].(map[string]any), r)
	}
}

// TestHorovodLocalSteps runs the ring test's script on two sync shards with
// local steps (DiLoCo, shoal run --local-steps 5): each rank takes 5 steps
// of its own SGD with momentum, then pushes the pseudo-gradient; with the
// outer optimizer SGD at lr 1 without momentum the shards' weights become
// the ranks' mean every 5 steps, and after the last 2 when the script
// calls push_local_steps, which the script's localref mode computes in
// one process. Each rank pushes 3 times in 12 steps, not 12, though the script calls synchronize() before
// each step() (Horovod's pattern for gradient clipping). Ranks told
// another H than the shards' are refused, naming both.
func TestHorovodLocalSteps(t *testing.T) {
	needTorch(t)
	const batch, h = 32, 5
	ref := runRanks(t, 1, 3*time.Minute, "localref", strconv.Itoa(batch), "2", strconv.Itoa(h))
	require.Equal(t, 0, ref[0].code, "%s\n%s", ref[0].raw, ref[0].stderr)
	want := ref[0].out["params"].(map[string]any)
	outer := func(c *ps.Config) {
		c.LocalSteps = h
		c.Optimizer.Algorithm, c.Optimizer.LR, c.Optimizer.Momentum = "sgd", 1, 0
	}
	addrs, initPath := startShardsConfig(t, consistency.Sync, 2, 2, nil, outer)
	// Horovod's synchronize-then-step pattern (gradient clipping) keeps
	// the local steps: synchronize has nothing to reduce on the servers.
	env := append(psEnv(consistency.Sync, addrs, initPath), "SHOAL_LOCAL_STEPS="+strconv.Itoa(h), "SYNC_THEN_STEP=1", "PUSH_AT_END=1")
	res := runRanksEnv(t, 2, 4*time.Minute, env, "train", strconv.Itoa(batch), "67108864", "1")
	for r, rr := range res {
		require.Equal(t, 0, rr.code, "rank %d: %s\n%s", r, rr.raw, rr.stderr)
		assert.Equal(t, 3.0, rr.out["ps"].(map[string]any)["steps"], "rank %d pushed every %d steps, and the last 2 at the end", r, h)
		assertParamsNear(t, want, rr.out["params"].(map[string]any), r)
	}

	addrs, initPath = startShardsConfig(t, consistency.Sync, 2, 1, nil, outer)
	res = runRanksEnv(t, 2, 3*time.Minute, append(psEnv(consistency.Sync, addrs, initPath), "SHOAL_LOCAL_STEPS=2"), "train", strconv.Itoa(batch), "67108864", "1")
	for r, rr := range res {
		require.Equal(t, 3, rr.code, "rank %d: %s\n%s", r, rr.raw, rr.stderr)
		assert.Contains(t, rr.out["error"], "this rank pushes every 2 steps (SHOAL_LOCAL_STEPS=2), but the parameter servers run with --local-steps 5", "rank %d", r)
	}
}

// TestHorovodLocalStepsInt8 runs TestHorovodLocalSteps's job (2 ranks, H=5,
// outer SGD at lr 1 on 2 sync shards) twice, in float32 and with shoal
// run --compression int8 (SHOAL_COMPRESSION=int8): the int8 ranks push
// int8, so the shards count under a third of float32's pseudo-gradient
// bytes (a quarter, and a float32 scale a piece); and the weights end
// within int8's rounding of the float32 job's. Each push rounds each
// value by at most half its block's step, max|Δ|/254, and the mean of the
// ranks' by no more; the bound taken is twice the sum of those over the
// pushes, which leaves the later rounds' local steps, taken from the
// rounded weights, as much again. The weights must also differ from
// float32's: the rounding happened.
func TestHorovodLocalStepsInt8(t *testing.T) {
	needTorch(t)
	const batch, h = 32, 5
	outer := func(c *ps.Config) {
		c.LocalSteps = h
		c.Optimizer.Algorithm, c.Optimizer.LR, c.Optimizer.Momentum = "sgd", 1, 0
	}
	run := func(compression string) (params map[string]any, pseudo []float64, bytes float64) {
		addrs, initPath, metrics := startShardsMetrics(t, consistency.Sync, 2, 2, nil, outer, true)
		env := append(psEnv(consistency.Sync, addrs, initPath), "SHOAL_LOCAL_STEPS="+strconv.Itoa(h), "PUSH_AT_END=1", "REPORT_PSEUDO=1")
		if compression != "" {
			env = append(env, "SHOAL_COMPRESSION="+compression)
		}
		res := runRanksEnv(t, 2, 4*time.Minute, env, "train", strconv.Itoa(batch), "67108864", "1")
		for r, rr := range res {
			require.Equal(t, 0, rr.code, "rank %d (%s): %s\n%s", r, compression, rr.raw, rr.stderr)
			require.Equal(t, 3.0, rr.out["ps"].(map[string]any)["steps"], "rank %d pushed every %d steps, and the last 2 at the end", r, h)
			for k, m := range floats(rr.out["pseudo_max"]) {
				if k == len(pseudo) {
					pseudo = append(pseudo, 0)
				}
				pseudo[k] = math.Max(pseudo[k], m)
			}
		}
		return res[0].out["params"].(map[string]any), pseudo, scrapeSum(t, metrics, "shoal_ps_pseudo_gradient_bytes_total")
	}
	f32, _, f32Bytes := run("")
	i8, pseudo, i8Bytes := run("int8")
	t.Logf("pseudo-gradient bytes: float32 %.0f, int8 %.0f; largest |pseudo-gradient| per push %v", f32Bytes, i8Bytes, pseudo)
	require.Len(t, pseudo, 3, "the int8 ranks' pushes")
	require.Positive(t, i8Bytes)
	assert.Less(t, 3*i8Bytes, f32Bytes, "int8 pushes: about a quarter of float32's bytes")
	var tol float64
	for _, m := range pseudo {
		tol += 2 * m / 254
	}
	var worst float64
	for name, w := range f32 {
		wv, gv := floats(w), floats(i8[name])
		require.Len(t, gv, len(wv), name)
		for i := range wv {
			worst = math.Max(worst, math.Abs(wv[i]-gv[i]))
			assert.InDelta(t, wv[i], gv[i], tol, "%s[%d]", name, i)
		}
	}
	t.Logf("largest difference from float32 %.3g, bound %.3g", worst, tol)
	assert.Greater(t, worst, 1e-6, "the int8 weights equal float32's: nothing was rounded")
}

// TestHorovodOptimizerAsync runs the script on an async shard: each
// rank's pushes are applied as they come, and the ranks report their
// staleness.
func TestHorovodOptimizerAsync(t *testing.T) {
	needTorch(t)
	addrs, initPath := startShards(t, consistency.Async, 2, 1)
	res := runRanksEnv(t, 2, 4*time.Minute, psEnv(consistency.Async, addrs, initPath), "train", "32", "67108864", "1")
	for r, rr := range res {
		require.Equal(t, 0, rr.code, "rank %d: %s\n%s", r, rr.raw, rr.stderr)
		stats := rr.out["ps"].(map[string]any)
		assert.Equal(t, 12.0, stats["steps"], "rank %d", r)
		assert.GreaterOrEqual(t, stats["max_staleness"], 0.0, "rank %d", r)
	}
}

// TestHorovodPSRanksWithDifferentModels: a rank that built another model
// makes every rank fail at its first step, naming each rank's model,
// before any of them joins the shards (where a sync rank would wait for
// the others' pushes).
func TestHorovodPSRanksWithDifferentModels(t *testing.T) {
	needTorch(t)
	addrs, initPath := startShards(t, consistency.Sync, 2, 1)
	res := runRanksEnv(t, 2, 3*time.Minute, append(psEnv(consistency.Sync, addrs, initPath), "WIDER_RANK=1", "SKIP_BROADCAST=1"), "train", "32", "67108864", "1")
	for r, rr := range res {
		require.Equal(t, 3, rr.code, "rank %d: %s\n%s", r, rr.raw, rr.stderr)
		assert.Contains(t, rr.out["error"], "the ranks built different models, so they cannot share parameter servers: rank 0: 6 tensors, 217 floats", "rank %d", r)
		assert.Contains(t, rr.out["error"], "rank 1: 6 tensors, 230 floats", "rank %d", r)
	}
}

// TestHorovodTLSAndToken runs a sync PS job whose shards want mutual TLS
// and the job's token: ranks given both (SHOAL_TLS_*,
// SHOAL_AUTH_TOKEN_FILE) train, over a ring that runs over TLS too;
// ranks without the token are refused by name.
func TestHorovodTLSAndToken(t *testing.T) {
	needTorch(t)
	files, err := secure.WriteTestPKI(t.TempDir(), nil, time.Hour)
	require.NoError(t, err)
	creds, err := secure.Load(files)
	require.NoError(t, err)
	tlsEnv := []string{"SHOAL_TLS_CERT=" + files.Cert, "SHOAL_TLS_KEY=" + files.Key, "SHOAL_TLS_CA=" + files.CA}

	addrs, initPath := startShardsWith(t, consistency.Sync, 2, 1, creds)
	env := append(append(psEnv(consistency.Sync, addrs, initPath), tlsEnv...), "SHOAL_AUTH_TOKEN_FILE="+files.Token)
	res := runRanksEnv(t, 2, 3*time.Minute, env, "train", "32", "67108864", "1")
	for r, rr := range res {
		require.Equal(t, 0, rr.code, "rank %d: %s\n%s", r, rr.raw, rr.stderr)
		assert.Equal(t, 12.0, rr.out["ps"].(map[string]any)["steps"], "rank %d", r)
	}

	addrs, initPath = startShardsWith(t, consistency.Sync, 2, 1, creds)
	res = runRanksEnv(t, 2, 3*time.Minute, append(psEnv(consistency.Sync, addrs, initPath), tlsEnv...), "train", "32", "67108864", "1")
	for r, rr := range res {
		require.Equal(t, 3, rr.code, "rank %d: %s\n%s", r, rr.raw, rr.stderr)
		assert.Contains(t, rr.out["error"], "Unauthenticated", "rank %d", r)
	}
}

// TestHorovodRun runs Horovod's horovod.run(func, args, np) through `import
// shoal as horovod` (shoal.run: spawned ranks on this host): every rank's
// result in rank order, a rank that raises failing the call, naming it, and
// `import shoal` loading no grpc.
func TestHorovodRun(t *testing.T) {
	needTorch(t)
	lib := library(t)
	pyPath, err := filepath.Abs("../../clients/python")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, systemPython, "testdata/hvd_run.py", "3")
	cmd.Env = append(os.Environ(), "SHOAL_LIBRARY="+lib, "PYTHONPATH="+pyPath, "SHOAL_COLLECTIVE_TIMEOUT=60", "OMP_NUM_THREADS=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "%s\n%s", stdout.String(), stderr.String())
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var out struct {
		Results []struct {
			Rank, Size int
			LocalRank  int `json:"local_rank"`
			Sum        []float64
		}
		Failure      string
		GrpcImported bool `json:"grpc_imported"`
	}
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &out), stdout.String())
	require.Len(t, out.Results, 3)
	for r, res := range out.Results {
		assert.Equal(t, r, res.Rank)
		assert.Equal(t, 3, res.Size)
		assert.Equal(t, r, res.LocalRank)
		assert.Equal(t, []float64{12, 12, 12}, res.Sum, "rank %d: 2·(1+2+3)", r)
	}
	assert.Contains(t, out.Failure, "1 of 2 ranks failed (rank 1: exit 1)")
	assert.Contains(t, out.Failure, "rank 1 fails on purpose")
	assert.False(t, out.GrpcImported, "import shoal loaded grpc")
}

// fashionDir is where Debian's dataset-fashion-mnist installs the idx files.
const fashionDir = "/usr/share/datasets/fashion-mnist"

// TestHorovodMNIST trains clients/python/examples/hvd_mnist.py (Horovod's
// API: DistributedSampler, DistributedOptimizer, broadcast_parameters,
// lr scaled by the ranks) on a subset of Fashion-MNIST, laid out for
// torchvision by scripts/torchvision-data.sh, for one epoch on one rank and
// on two: the two ranks must end with the same weights, both runs must
// learn, and the two ranks' test accuracy must be close to one rank's (3
// points on this subset; the whole data set's figures are in
// docs/BENCHMARKS.md).
func TestHorovodMNIST(t *testing.T) {
	needTorch(t, "torchvision")
	if _, err := os.Stat(fashionDir + "/train-images-idx3-ubyte.gz"); err != nil {
		t.Skipf("Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist): %v", err)
	}
	data := t.TempDir()
	out, err := exec.CommandContext(t.Context(), "../../scripts/torchvision-data.sh", fashionDir, data).CombinedOutput()
	require.NoError(t, err, "%s", out)
	args := []string{"--data-dir", data, "--epochs", "1", "--train-limit", "12000", "--test-limit", "2000", "--json"}
	accuracy := map[int]float64{}
	for _, n := range []int{1, 2} {
		res := runScript(t, n, 3*time.Minute, nil, "../../clients/python/examples/hvd_mnist.py", args...)
		for r, rr := range res {
			require.Equal(t, 0, rr.code, "%d ranks, rank %d: %s\n%s", n, r, rr.raw, rr.stderr)
			assert.Equal(t, float64(n), rr.out["size"], "rank %d", r)
			assert.Equal(t, res[0].out["weights_sha256"], rr.out["weights_sha256"], "%d ranks: rank %d's weights differ from rank 0's", n, r)
			assert.Equal(t, res[0].out["accuracy"], rr.out["accuracy"], "%d ranks: rank %d", n, r)
		}
		acc, _ := res[0].out["accuracy"].(float64)
		t.Logf("%d ranks: test accuracy %.2f%%, %.1f s", n, 100*acc, res[0].out["seconds"])
		assert.Greater(t, acc, 0.55, "%d ranks did not learn", n)
		accuracy[n] = acc
	}
	assert.InDelta(t, accuracy[1], accuracy[2], 0.03, "2 ranks' test accuracy is not close to one rank's")
}

// TestHorovodSyncBatchNorm checks hvd.SyncBatchNorm on 2 and 3 ranks, each
// with its share (uneven) of a batch, against torch's BatchNorm2d on the
// whole batch: outputs, input gradients, running statistics after two
// steps, the weight and bias gradients summed over the ranks, and eval
// mode.
func TestHorovodSyncBatchNorm(t *testing.T) {
	needTorch(t)
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d ranks", n), func(t *testing.T) {
			res := runRanks(t, n, 3*time.Minute, "syncbn")
			for r, rr := range res {
				require.Equal(t, 0, rr.code, "rank %d: %s\n%s", r, rr.raw, rr.stderr)
				diff, _ := rr.out["diff"].(map[string]any)
				require.NotNil(t, diff, "rank %d: %s", r, rr.raw)
				assert.Equal(t, 2.0, diff["batches_tracked"], "rank %d", r)
				delete(diff, "batches_tracked")
				for k, v := range diff {
					assert.Less(t, v.(float64), 2e-5, "rank %d: %s differs from BatchNorm2d on the whole batch", r, k)
				}
				assert.Len(t, diff, 7, "rank %d: %v", r, diff)
			}
		})
	}
}
