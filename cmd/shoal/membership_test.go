package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/internal/lockedio"
	"github.com/shoalml/shoal/internal/testcluster"
	"github.com/shoalml/shoal/launch"
	"github.com/shoalml/shoal/nn"
)

const fashionDir = "/usr/share/datasets/fashion-mnist"

// trainJSON runs shoal train with args and --json. With kill (a flag and
// its value, e.g. "--rank", "1"), it SIGKILLs the child started with it
// once the first epoch line shows. It returns the run's summary
// and its stdout.
func trainJSON(t *testing.T, kill []string, args ...string) (launch.Result, string) {
	t.Helper()
	ctx := ctxT(t, 4*time.Minute)
	cmd := exec.CommandContext(ctx, shoalBin, append([]string{"train", "--json"}, args...)...)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stderr := lockedio.NewBuffer()
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	var lines []string
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	killed := kill == nil
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if !killed && strings.HasPrefix(sc.Text(), "epoch 1/") {
			require.NoError(t, syscall.Kill(childWith(t, cmd.Process.Pid, kill[0], kill[1]), syscall.SIGKILL))
			killed = true
		}
	}
	_, _ = io.Copy(io.Discard, out)
	require.NoError(t, cmd.Wait(), "stdout:\n%s\nstderr:\n%s", strings.Join(lines, "\n"), stderr)
	require.True(t, killed, "no epoch line to kill after:\n%s", strings.Join(lines, "\n"))
	var res launch.Result
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &res))
	return res, strings.Join(lines, "\n")
}

// TestAKilledWorkerLeavesTheOthersTraining SIGKILLs worker 1 of 3 halfway
// through a Fashion-MNIST run: the others finish it (exit 0), shard 0
// reports the death, and in sync and SSP the final accuracy is within a
// point of the same run undisturbed. In async mode nobody waited for
// worker 1 anyway.
func TestAKilledWorkerLeavesTheOthersTraining(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("finds the launcher's children through /proc, which only Linux has")
	}
	if _, err := os.Stat(fashionDir + "/train-images-idx3-ubyte.gz"); err != nil {
		t.Skipf("Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist): %v", err)
	}
	for _, mode := range []string{"sync", "ssp", "async", "ring"} {
		t.Run(mode, func(t *testing.T) {
			args := []string{"--mode", mode, "--workers", "3", "--epochs", "3", "--hidden", "128", "--lr", "0.02"}
			undisturbed, _ := trainJSON(t, nil, args...)
			res, out := trainJSON(t, []string{"--rank", "1"}, args...)
			assert.Empty(t, undisturbed.MembershipEvents)
			assert.Contains(t, out, "worker 1 was killed (signal: killed)")
			if mode == "async" && len(res.MembershipEvents) == 0 {
				// Nobody waits for a dead async worker: the run may end
				// before gossip declares it dead.
				t.Log("async: the run ended before shard 0 saw worker 1 die")
			} else {
				require.Len(t, res.MembershipEvents, 1, "%s", out)
				ev := res.MembershipEvents[0]
				live := 2
				if mode == "async" && ev.Live < 2 {
					// Nobody waits for a dead async worker: the others may
					// have finished and left before gossip declared it dead.
					t.Logf("async: shard 0 saw worker 1 die after %d of the others had left", 2-ev.Live)
					live = ev.Live
				}
				assert.Equal(t, launch.MembershipEvent{Role: "worker", Rank: 1, Change: "died", Step: ev.Step, Live: live, Seconds: ev.Seconds, Cause: "signal: killed"}, ev)
				assert.Positive(t, ev.Step)
				assert.Less(t, ev.Step, res.Steps)
				goOn := fmt.Sprintf("%d workers go on", live)
				if live == 1 {
					goOn = "1 worker goes on"
				}
				assert.Contains(t, out, fmt.Sprintf("worker 1 died at step %d (signal: killed); %s", ev.Step, goOn))
			}
			assert.Equal(t, []int{1}, res.FailedWorkers)
			if mode == "ring" {
				// The ring re-formed with 2 ranks at the kill's step k
				// and shared the rest of that epoch between them: each
				// epoch's 60,000 samples are seen once, so the step count
				// follows from k alone.
				assert.Equal(t, ringStepsAfterKill(res.MembershipEvents[0].Step, 60000, 64, 3, 2, 3), res.Steps, "steps of the re-formed ring")
			} else {
				assert.Equal(t, undisturbed.Steps, res.Steps, "the survivors ran the whole run")
			}
			if mode != "async" {
				// The bar for the synchronous modes. Async runs
				// differ from run to run by more than a point under load
				// (CI saw 0.8667 undisturbed, 0.8542 killed), and the
				// issue asks of async only that the kill change nothing
				// for the others: they run every step and exit 0, above.
				assert.InDelta(t, undisturbed.TestAccuracy, res.TestAccuracy, 0.01, "final test accuracy")
			}
			t.Logf("%s: test accuracy %.4f undisturbed, %.4f with worker 1 killed: %+v", mode, undisturbed.TestAccuracy, res.TestAccuracy, res.MembershipEvents)
		})
	}
}

// ringStepsAfterKill is the step count of a ring of before ranks that
// loses some at step k and goes on with after ranks, sharing the rest of
// the epoch: epochs of n samples, batch b per rank.
func ringStepsAfterKill(k int64, n, b, before, after, epochs int) int64 {
	steps := func(samples, world int) int64 { return int64(((samples+world-1)/world + b - 1) / b) }
	per := steps(n, before)
	epoch := k / per
	used := int(k-epoch*per) * b * before
	total := k + steps(n-used, after)
	return total + int64(epochs-int(epoch)-1)*steps(n, after)
}

// TestARestartedWorkerRejoins runs a shard and two workers by hand, joined
// through gossip as the README shows, SIGKILLs worker 1 mid-run, waits for
// the shard to report it dead, starts it again with the same flags, and
// checks that it rejoins where the run is (not at step 0) and that both
// workers finish the run.
func TestARestartedWorkerRejoins(t *testing.T) {
	// Enough steps that worker 0, alone once worker 1 is dead, cannot
	// finish the run before worker 1 is back: CI saw an async worker 0
	// run out 1,500 steps first (as TestARestartedRingRankRejoins).
	const steps = 6000
	for _, mode := range []string{"sync", "ssp", "async"} {
		t.Run(mode, func(t *testing.T) {
			ctx := ctxT(t, 3*time.Minute)
			ps := startProc(t, "ps", "--listen", "127.0.0.1:0", "--events", "--hidden", "128", "--mode", mode, "--workers", "2",
				"--gossip-addr", "127.0.0.1:0")
			up := ps.next(t, ctx, "listening event", func(e launch.Event) bool { return e.Event == launch.Listening })
			require.NotEmpty(t, up.Gossip, "the shard gossips")
			workerArgs := func(rank int) []string {
				return []string{"worker", "--servers", up.Addr, "--join", up.Gossip, "--rank", fmt.Sprint(rank), "--world-size", "2",
					"--events", "--mode", mode, "--hidden", "128", "--dataset", "synthetic", "--steps", fmt.Sprint(steps), "--eval=false",
					"--log-level", "info"}
			}
			w0 := startProc(t, workerArgs(0)...)
			w1 := startProc(t, workerArgs(1)...)
			isProgress := func(e launch.Event) bool { return e.Event == launch.Progress }
			w1.next(t, ctx, "progress of worker 1", isProgress)

			require.NoError(t, w1.cmd.Process.Kill())
			require.Error(t, w1.exit(t, ctx, "worker 1"), "worker 1 should have died of SIGKILL")
			died := ps.next(t, ctx, "worker 1's death", func(e launch.Event) bool { return e.Event == launch.Member && e.Rank == 1 && e.Change != "joined" })
			assert.Equal(t, "died", died.Change)
			assert.Equal(t, 1, died.Live)

			again := startProc(t, workerArgs(1)...)
			back := ps.next(t, ctx, "worker 1's return", func(e launch.Event) bool { return e.Event == launch.Member && e.Rank == 1 })
			assert.Equal(t, "rejoined", back.Change)
			assert.Equal(t, 2, back.Live)
			for i, w := range []*proc{w0, again} {
				done := w.next(t, ctx, "done", func(e launch.Event) bool { return e.Event == launch.Done })
				assert.Equal(t, int64(steps), done.Steps, "worker %d ends with the run", i)
				if i == 1 {
					assert.Less(t, done.Samples, steps*64, "the restarted worker did not begin at step 0")
				}
				require.NoError(t, w.exit(t, ctx, fmt.Sprintf("worker %d", i)), "stderr:\n%s", w.stderr)
			}
			assert.Contains(t, again.stderr.String(), "joining a run under way", "the restarted worker begins where the run is")
		})
	}
}

// TestARestartedRingRankRejoins runs three ring ranks by hand, joined
// through gossip, SIGKILLs rank 1 mid-run, waits for rank 0 to report the
// ring re-formed without it, starts it again with the same flags, and
// checks that it is taken back in where the run is and that all three
// finish the run with the same step count.
func TestARestartedRingRankRejoins(t *testing.T) {
	ctx := ctxT(t, 3*time.Minute)
	// Enough steps that the two survivors cannot finish the run before
	// the restarted rank is back: its start, plus memberlist's
	// DeadNodeReclaimTime (1 s) before its name may come back at a new
	// address, took up to 1.6 s in CI (2 cores, loaded), in which the
	// survivors ran about 1,200 steps.
	const steps = 6000
	args := func(rank int, join string) []string {
		a := []string{"worker", "--mode", "ring", "--rank", fmt.Sprint(rank), "--world-size", "3", "--events", "--hidden", "128",
			"--dataset", "synthetic", "--steps", fmt.Sprint(steps), "--eval=false", "--log-level", "info", "--gossip-addr", "127.0.0.1:0"}
		if join != "" {
			a = append(a, "--join", join)
		}
		return a
	}
	r0 := startProc(t, args(0, "")...)
	up := r0.next(t, ctx, "listening event", func(e launch.Event) bool { return e.Event == launch.Listening })
	require.NotEmpty(t, up.Gossip, "rank 0 gossips")
	r1 := startProc(t, args(1, up.Gossip)...)
	r2 := startProc(t, args(2, up.Gossip)...)
	isProgress := func(e launch.Event) bool { return e.Event == launch.Progress }
	r1.next(t, ctx, "progress of rank 1", isProgress)

	require.NoError(t, r1.cmd.Process.Kill())
	require.Error(t, r1.exit(t, ctx, "rank 1"), "rank 1 should have died of SIGKILL")
	died := r0.next(t, ctx, "rank 1's death", func(e launch.Event) bool { return e.Event == launch.Member && e.Rank == 1 })
	assert.Equal(t, "died", died.Change)
	assert.Equal(t, 2, died.Live)

	again := startProc(t, args(1, up.Gossip)...)
	back := r0.next(t, ctx, "rank 1's return", func(e launch.Event) bool { return e.Event == launch.Member && e.Rank == 1 })
	assert.Equal(t, "rejoined", back.Change)
	assert.Equal(t, 3, back.Live)
	assert.Greater(t, back.Steps, died.Steps)
	for i, w := range []*proc{r0, again, r2} {
		done := w.next(t, ctx, "done", func(e launch.Event) bool { return e.Event == launch.Done })
		assert.Equal(t, int64(steps), done.Steps, "rank %d ends with the run", i)
		if w == again {
			assert.Less(t, done.Samples, steps*64, "the restarted rank did not begin at step 0")
		}
		require.NoError(t, w.exit(t, ctx, fmt.Sprintf("rank %d", i)), "stderr:\n%s", w.stderr)
	}
}

// TestGossipWithTheWrongKey: a worker whose --gossip-key-file differs from
// the shard's is not admitted, and says why.
func TestGossipWithTheWrongKey(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	dir := t.TempDir()
	key := func(name string, b byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, bytes.Repeat([]byte{b}, 32), 0o600))
		return p
	}
	ps := startProc(t, "ps", "--listen", "127.0.0.1:0", "--events", "--hidden", "32", "--gossip-addr", "127.0.0.1:0", "--gossip-key-file", key("a.key", 1))
	up := ps.next(t, ctx, "listening event", func(e launch.Event) bool { return e.Event == launch.Listening })
	cmd := exec.CommandContext(ctx, shoalBin, "worker", "--servers", up.Addr, "--join", up.Gossip, "--gossip-key-file", key("b.key", 2),
		"--hidden", "32", "--dataset", "synthetic", "--steps", "10", "--join-timeout", "20s")
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "%s", out)
	assert.Contains(t, string(out), "membership: --join "+up.Gossip)
	assert.Contains(t, string(out), "no installed keys could decrypt the message")
}

// BenchmarkKillRecovery measures, per mode, how long the survivors take to
// go on after a worker is SIGKILLed: a shard and three workers by hand on
// loopback (gossip with loopback detection), worker 1 killed once every
// worker is training, and the time from the kill until each survivor has
// reported two steps more than in its first report after the kill (in sync
// mode the step in progress waits for the dead worker until membership
// takes it out; so may the next).
// Each iteration is one kill on a fresh job; run it with
//
//	go test -run '^$' -bench KillRecovery -benchtime 5x ./cmd/shoal
//
// and read the median and max it reports (make bench-faults).
func BenchmarkKillRecovery(b *testing.B) {
	for _, mode := range []string{"sync", "ssp", "async", "ring"} {
		b.Run(mode, func(b *testing.B) {
			var took []time.Duration
			for range b.N {
				took = append(took, killAndRecover(b, mode))
			}
			slices.Sort(took)
			b.ReportMetric(took[len(took)/2].Seconds(), "s-median")
			b.ReportMetric(took[len(took)-1].Seconds(), "s-max")
			b.Logf("%s: kill to the survivors' next completed step, %d kills: %v", mode, len(took), took)
		})
	}
}

func killAndRecover(b *testing.B, mode string) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	isUp := func(e launch.Event) bool { return e.Event == launch.Listening }
	ws := make([]*proc, 3)
	args := func(r int) []string {
		return []string{"worker", "--rank", fmt.Sprint(r), "--world-size", "3", "--events", "--mode", mode, "--hidden", "128",
			"--dataset", "synthetic", "--steps", "100000000", "--eval=false", "--progress-every", "0", "--threads", "1", "--gossip-addr", "127.0.0.1:0"}
	}
	if mode == "ring" {
		// No server: rank 0 starts the gossip, the others join it.
		ws[0] = startProc(b, args(0)...)
		up := ws[0].next(b, ctx, "listening event", isUp)
		for r := 1; r < len(ws); r++ {
			ws[r] = startProc(b, append(args(r), "--join", up.Gossip)...)
		}
	} else {
		ps := startProc(b, "ps", "--listen", "127.0.0.1:0", "--events", "--hidden", "128", "--mode", mode, "--workers", "3", "--gossip-addr", "127.0.0.1:0")
		up := ps.next(b, ctx, "listening event", isUp)
		for r := range ws {
			ws[r] = startProc(b, append(args(r), "--servers", up.Addr, "--join", up.Gossip)...)
		}
	}
	global := func(e launch.Event) int { return e.Epoch*e.EpochSteps + e.Step }
	isProgress := func(e launch.Event) bool { return e.Event == launch.Progress }
	for _, w := range ws {
		w.next(b, ctx, "progress", isProgress)
	}
	// Events queue while nobody reads, and once the queue is full the new
	// ones are dropped: empty it, so that what comes next is fresh.
	for _, w := range ws {
		for queued := true; queued; {
			select {
			case <-w.events:
			default:
				queued = false
			}
		}
	}
	b.StartTimer()
	kill := time.Now()
	if err := ws[1].cmd.Process.Kill(); err != nil {
		b.Fatal(err)
	}
	var took time.Duration
	for _, r := range []int{0, 2} {
		// The first report after the kill names the step in progress at
		// the kill or a later one.
		at := global(ws[r].next(b, ctx, "progress", isProgress))
		ws[r].next(b, ctx, "two more steps", func(e launch.Event) bool { return isProgress(e) && global(e) >= at+2 })
		took = max(took, time.Since(kill))
	}
	b.StopTimer()
	return took
}

// TestAShardRestartedElsewhereIsFollowed: shard 1 of 2 (async, with
// checkpoints) is SIGKILLed mid-run and started again on another port,
// joining shard 0's gossip; the worker learns the new address from
// membership and finishes its run against it.
func TestAShardRestartedElsewhereIsFollowed(t *testing.T) {
	ctx := ctxT(t, 3*time.Minute)
	dir := t.TempDir()
	psArgs := func(shard int, join string) []string {
		args := []string{"ps", "--listen", "127.0.0.1:0", "--events", "--hidden", "64", "--shard", fmt.Sprint(shard), "--servers", "2",
			"--chunk-bytes", "4096", "--checkpoint-dir", dir, "--checkpoint-every", "20", "--gossip-addr", "127.0.0.1:0", "--log-level", "info"}
		if join != "" {
			args = append(args, "--join", join)
		}
		return args
	}
	isUp := func(e launch.Event) bool { return e.Event == launch.Listening }
	ps0 := startProc(t, psArgs(0, "")...)
	up0 := ps0.next(t, ctx, "shard 0", isUp)
	ps1 := startProc(t, psArgs(1, up0.Gossip)...)
	up1 := ps1.next(t, ctx, "shard 1", isUp)
	w := startProc(t, "worker", "--servers", up0.Addr+","+up1.Addr, "--join", up0.Gossip, "--events", "--hidden", "64",
		"--dataset", "synthetic", "--batch", "16", "--steps", "3000", "--eval=false", "--log-level", "info")
	w.next(t, ctx, "progress", func(e launch.Event) bool { return e.Event == launch.Progress && e.Step >= 60 })

	require.NoError(t, ps1.cmd.Process.Kill())
	ps1.done <- <-ps1.done
	again := startProc(t, psArgs(1, up0.Gossip)...)
	moved := again.next(t, ctx, "shard 1 again", isUp)
	require.NotEqual(t, up1.Addr, moved.Addr, "a new port")

	done := w.next(t, ctx, "the worker's done event", func(e launch.Event) bool { return e.Event == launch.Done })
	assert.Equal(t, int64(3000), done.Steps)
	select {
	case err := <-w.done:
		require.NoError(t, err, "worker stderr:\n%s", w.stderr)
		w.done <- nil
	case <-ctx.Done():
		t.Fatal("the worker did not exit")
	}
	assert.Contains(t, w.stderr.String(), "shard moved")
	assert.Contains(t, again.stderr.String(), "resumed from checkpoint")
}

// TestShoalTrainRestartsAKilledShard SIGKILLs shard 1 of 2 halfway through a
// sync run with --journal: shoal train starts it again on its address, it
// replays its checkpoint and journal, and the run ends at the weights of
// the same run undisturbed.
func TestShoalTrainRestartsAKilledShard(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("finds the launcher's children through /proc, which only Linux has")
	}
	args := []string{"--mode", "sync", "--workers", "2", "--servers", "2", "--dataset", "synthetic", "--hidden", "32", "--steps", "400",
		"--optimizer", "momentum", "--lr", "0.05", "--checkpoint-every", "50", "--journal"}
	dir := t.TempDir()
	want := trainSave(t, append(args, "--checkpoint-dir", filepath.Join(dir, "undisturbed"))...)
	save := filepath.Join(dir, "w.safetensors")
	res, out := trainJSON(t, []string{"--shard", "1"}, append(args, "--checkpoint-dir", filepath.Join(dir, "killed"), "--save", save)...)
	assert.Contains(t, out, "ps 1 was killed (signal: killed); restarted from its checkpoint on 127.0.0.1:")
	require.NotEmpty(t, res.MembershipEvents)
	assert.Equal(t, "restarted", res.MembershipEvents[0].Change)
	assert.Equal(t, int64(400), res.Steps)
	_, got, _, err := nn.LoadSafetensors(save)
	require.NoError(t, err)
	require.Len(t, got, len(want))
	rel := testcluster.RelErr(got, want)
	t.Logf("relative error against the undisturbed run: %.2e", rel)
	assert.LessOrEqual(t, rel, 1e-5, "no update lost or applied twice")
}

// TestExitWhenDoneWaitsForAWorkerThatNeverCame: a shard of a 2-worker job
// with --exit-when-done sees worker 0 finish and leave, and worker 1
// never join (it failed before it came). It waits --exit-wait for it,
// then ends the run, naming the rank that never came, instead of serving
// for ever.
func TestExitWhenDoneWaitsForAWorkerThatNeverCame(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	ps := startProc(t, "ps", "--listen", "127.0.0.1:0", "--events", "--hidden", "32", "--mode", "async", "--workers", "2",
		"--gossip-addr", "127.0.0.1:0", "--exit-when-done", "--exit-wait", "2s", "--log-level", "info")
	up := ps.next(t, ctx, "listening event", func(e launch.Event) bool { return e.Event == launch.Listening })
	out, err := exec.CommandContext(ctx, shoalBin, "worker", "--servers", up.Addr, "--join", up.Gossip, "--rank", "0", "--world-size", "2",
		"--mode", "async", "--hidden", "32", "--dataset", "synthetic", "--steps", "20", "--eval=false").CombinedOutput()
	require.NoError(t, err, "worker 0:\n%s", out)
	left := ps.next(t, ctx, "worker 0's leave", func(e launch.Event) bool { return e.Event == launch.Member && e.Rank == 0 && e.Change != "joined" })
	assert.Equal(t, "left", left.Change)
	require.NoError(t, ps.exit(t, ctx, "the shard"), "stderr:\n%s", ps.stderr)
	assert.Contains(t, ps.stderr.String(), "waiting for the ranks that never joined")
	assert.Contains(t, ps.stderr.String(), "these ranks never joined: the run is over without them")
	assert.Contains(t, ps.stderr.String(), "missing=[1]")
}

// TestASignalledWorkerLeavesCleanly: SIGTERM (docker stop, Kubernetes,
// Slurm at its time limit) ends a worker's run cleanly. In a sync job of
// two, worker 1 stopped by SIGTERM exits 0, the shard sees it leave (not
// die) and worker 0 trains on without it; worker 0 stopped the same way
// evaluates the weights so far and exits 0; the shard, every worker gone,
// ends the run.
func TestASignalledWorkerLeavesCleanly(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	ps := startProc(t, "ps", "--listen", "127.0.0.1:0", "--events", "--hidden", "32", "--mode", "sync", "--workers", "2",
		"--gossip-addr", "127.0.0.1:0", "--exit-when-done", "--log-level", "info")
	up := ps.next(t, ctx, "listening event", func(e launch.Event) bool { return e.Event == launch.Listening })
	args := func(rank int) []string {
		return []string{"worker", "--servers", up.Addr, "--join", up.Gossip, "--rank", fmt.Sprint(rank), "--world-size", "2",
			"--mode", "sync", "--hidden", "32", "--dataset", "synthetic", "--batch", "16", "--steps", "100000000"}
	}
	w0 := exec.CommandContext(ctx, shoalBin, args(0)...)
	out0, err0 := lockedio.NewBuffer(), lockedio.NewBuffer()
	w0.Stdout, w0.Stderr = out0, err0
	require.NoError(t, w0.Start())
	t.Cleanup(func() { _ = w0.Process.Kill(); _ = w0.Wait() })
	w1 := startProc(t, append(args(1), "--events")...)
	isProgress := func(e launch.Event) bool { return e.Event == launch.Progress }
	w1.next(t, ctx, "progress of worker 1", isProgress)

	require.NoError(t, w1.cmd.Process.Signal(syscall.SIGTERM))
	done := w1.next(t, ctx, "worker 1's done event", func(e launch.Event) bool { return e.Event == launch.Done })
	assert.True(t, done.Stopped, "worker 1's run ended early")
	assert.Positive(t, done.Steps)
	require.NoError(t, w1.exit(t, ctx, "worker 1"), "worker 1 after SIGTERM; stderr:\n%s", w1.stderr)
	left := ps.next(t, ctx, "worker 1's leave", func(e launch.Event) bool { return e.Event == launch.Member && e.Rank == 1 && e.Change != "joined" })
	assert.Equal(t, "left", left.Change, "worker 1 left the run, it did not die")

	// Worker 0 goes on alone: epochs end after worker 1 left.
	epochs := func() int { return strings.Count(out0.String(), "epoch ") }
	seen := epochs()
	require.True(t, poll(ctx, func() bool { return epochs() > seen }), "worker 0 did not train on without worker 1; stdout:\n%s\nstderr:\n%s", out0, err0)
	require.NoError(t, w0.Process.Signal(syscall.SIGTERM))
	require.NoError(t, w0.Wait(), "worker 0 after SIGTERM; stderr:\n%s", err0)
	assert.Regexp(t, `worker 0 of 2: \d+ steps, .*, stopped early by a signal\n`, out0.String())
	assert.Regexp(t, `test: loss [0-9.]+, accuracy [0-9.]+%`, out0.String(), "worker 0 evaluated the weights so far")
	require.NoError(t, ps.exit(t, ctx, "the shard"), "the shard, every worker gone; stderr:\n%s", ps.stderr)
	assert.Contains(t, ps.stderr.String(), "every worker has left: the run is over")
}
