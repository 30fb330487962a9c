package main

import (
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/launch"
)

// TestAStoppedWorkerIsNamedInTheStallLogs stops one of two sync workers
// with SIGSTOP: the shard and the other worker log, once per
// --stall-warning, that they wait for it, for which step and since when;
// after SIGCONT the run goes on.
func TestAStoppedWorkerIsNamedInTheStallLogs(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	const every = "300ms"
	ps := startProc(t, "ps", "--listen", "127.0.0.1:0", "--events", "--hidden", "32", "--mode", "sync", "--workers", "2", "--stall-warning", every)
	addr := ps.next(t, ctx, "listening event", func(e launch.Event) bool { return e.Event == launch.Listening }).Addr
	workerArgs := func(rank int) []string {
		return []string{"worker", "--servers", addr, "--rank", fmt.Sprint(rank), "--world-size", "2", "--events", "--hidden", "32", "--mode", "sync",
			"--dataset", "synthetic", "--batch", "16", "--steps", "100000000", "--stall-warning", every}
	}
	w0 := startProc(t, workerArgs(0)...)
	w1 := startProc(t, workerArgs(1)...)
	isProgress := func(e launch.Event) bool { return e.Event == launch.Progress }
	w0.next(t, ctx, "progress of worker 0", isProgress)
	w1.next(t, ctx, "progress of worker 1", isProgress)

	stopped := time.Now()
	require.NoError(t, w1.cmd.Process.Signal(syscall.SIGSTOP))
	shardLog := regexp.MustCompile(`msg="stalled: pulls are waiting for other workers" .*waiting_for_workers=\[1\] step=(\d+) since=\S+ waited=\S+`)
	workerLog := regexp.MustCompile(`msg="stalled: no step finished" .*rank=0 step=(\d+) since=\S+ waited=\S+ waiting_for="shard 0: workers \[1\] at step (\d+) since \S+ \(1 pulls waiting\)"`)
	var shardSaw, workerSaw []string
	ok := poll(ctx, func() bool {
		shardSaw, workerSaw = shardLog.FindStringSubmatch(ps.stderr.String()), workerLog.FindStringSubmatch(w0.stderr.String())
		return shardSaw != nil && workerSaw != nil
	})
	require.True(t, ok, "no stall logged naming worker 1 before the deadline; shard:\n%s\nworker 0:\n%s", ps.stderr, w0.stderr)
	t.Logf("stall logged %v after SIGSTOP (interval %s):\n%s\n%s", time.Since(stopped).Round(time.Millisecond), every, shardSaw[0], workerSaw[0])
	assert.Equal(t, shardSaw[1], workerSaw[2], "the shard and the worker name the same step")

	// Logged once per interval, not once per waiting pull or per tick of
	// every call: count the lines over a few intervals.
	ok = poll(ctx, func() bool { return strings.Count(ps.stderr.String(), "stalled: pulls are waiting") >= 3 })
	require.True(t, ok, "the shard logged the stall only once: %s", ps.stderr)

	require.NoError(t, w1.cmd.Process.Signal(syscall.SIGCONT))
	mark := w0.next(t, ctx, "progress of worker 0 after SIGCONT", isProgress)
	w0.next(t, ctx, "later progress of worker 0", func(e launch.Event) bool {
		return isProgress(e) && (e.Epoch > mark.Epoch || e.Step > mark.Step)
	})
	for _, p := range []*proc{w0, w1, ps} {
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	}
	for name, p := range map[string]*proc{"worker 0": w0, "worker 1": w1, "ps": ps} {
		p.exit(t, ctx, name)
	}
}

// TestAStoppedRankIsNamedInTheStallLogs stops one of two ring ranks with
// SIGSTOP: the other logs, once per --stall-warning, the rank its link
// waits on; after SIGCONT the ring goes on.
func TestAStoppedRankIsNamedInTheStallLogs(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	const every = "300ms"
	rankArgs := func(rank int, master string) []string {
		return []string{"worker", "--mode", "ring", "--master", master, "--rank", fmt.Sprint(rank), "--world-size", "2", "--events", "--hidden", "32",
			"--dataset", "synthetic", "--batch", "16", "--steps", "100000000", "--stall-warning", every, "--eval=false"}
	}
	r0 := startProc(t, rankArgs(0, "127.0.0.1:0")...)
	master := r0.next(t, ctx, "rank 0's rendezvous address", func(e launch.Event) bool { return e.Event == launch.Listening && e.Addr != "" }).Addr
	r1 := startProc(t, rankArgs(1, master)...)
	isProgress := func(e launch.Event) bool { return e.Event == launch.Progress }
	r0.next(t, ctx, "progress of rank 0", isProgress)
	r1.next(t, ctx, "progress of rank 1", isProgress)

	stopped := time.Now()
	require.NoError(t, r1.cmd.Process.Signal(syscall.SIGSTOP))
	stall := regexp.MustCompile(`msg="stalled: no step finished" .*rank=0 step=\d+ since=\S+ waited=\S+ waiting_for="rank 1: (receiving from|sending to) it since \S+`)
	var saw string
	ok := poll(ctx, func() bool {
		saw = stall.FindString(r0.stderr.String())
		return saw != ""
	})
	require.True(t, ok, "rank 0 logged no stall naming rank 1 before the deadline; rank 0:\n%s", r0.stderr)
	t.Logf("stall logged %v after SIGSTOP (interval %s): %s", time.Since(stopped).Round(time.Millisecond), every, saw)

	require.NoError(t, r1.cmd.Process.Signal(syscall.SIGCONT))
	mark := r0.next(t, ctx, "progress of rank 0 after SIGCONT", isProgress)
	r0.next(t, ctx, "later progress of rank 0", func(e launch.Event) bool {
		return isProgress(e) && (e.Epoch > mark.Epoch || e.Step > mark.Step)
	})
	for _, p := range []*proc{r0, r1} {
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	}
	r0.exit(t, ctx, "rank 0")
	r1.exit(t, ctx, "rank 1")
}
