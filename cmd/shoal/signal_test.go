package main

import (
	"fmt"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/internal/lockedio"
	"github.com/shoalml/shoal/launch"
)

// TestASignalledStaticRingEvaluates sends SIGTERM to both ranks of a
// static ring (no gossip), rank 1 first, as scancel and Slurm's time limit
// reach a step's tasks one by one: both exit 0, "stopped early by a
// signal", and rank 0 prints the test line of its own weights. Before,
// rank 0 died with "allreduce ... context canceled" or "connection closed
// by peer" and no test line (issue 44, item 10).
func TestASignalledStaticRingEvaluates(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	master := l.Addr().String()
	require.NoError(t, l.Close())
	type rank struct {
		out  *lockedio.Buffer
		cmd  *exec.Cmd
		done chan error
	}
	start := func(r int) *rank {
		cmd := exec.Command(shoalBin, "worker", "--mode", "ring", "--master", master, "--rank", fmt.Sprint(r), "--world-size", "2",
			"--hidden", "16", "--dataset", "synthetic", "--batch", "16", "--steps", "100000000")
		p := &rank{out: lockedio.NewBuffer(), cmd: cmd, done: make(chan error, 1)}
		cmd.Stdout, cmd.Stderr = p.out, p.out
		require.NoError(t, cmd.Start())
		go func() { p.done <- cmd.Wait() }()
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			err := <-p.done
			p.done <- err
		})
		return p
	}
	r0, r1 := start(0), start(1)
	require.True(t, poll(ctx, func() bool { return strings.Contains(r0.out.String(), "epoch 1/") }), "rank 0 trained no epoch:\n%s", r0.out)
	require.NoError(t, r1.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, r0.cmd.Process.Signal(syscall.SIGTERM))
	for name, p := range map[string]*rank{"rank 0": r0, "rank 1": r1} {
		select {
		case err := <-p.done:
			p.done <- err
			require.NoError(t, err, "%s:\n%s", name, p.out)
		case <-ctx.Done():
			t.Fatalf("%s did not exit:\n%s", name, p.out)
		}
		require.Contains(t, p.out.String(), "stopped early by a signal", name)
	}
	require.Regexp(t, `(?m)^test: loss [0-9.]+, accuracy [0-9.]+% \(.*rank 0's weights after step [0-9]+, evaluated alone`, r0.out.String())
}

// TestAWorkerSignalledAfterItsShardSaysWhatItDidNotEvaluate: a plain
// scancel signals the shard and the workers at once, so rank 0's final
// pull finds the shard gone. Rank 0 then gives up within its short
// after-signal deadline and says "test: not evaluated" and why; before,
// it retried for --call-timeout (60 s, longer than Slurm's 30 s KillWait)
// and printed no test line at all (issue 44, item 10).
func TestAWorkerSignalledAfterItsShardSaysWhatItDidNotEvaluate(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	ps := startProc(t, "ps", "--listen", "127.0.0.1:0", "--events", "--hidden", "16", "--mode", "async", "--workers", "1")
	up := ps.next(t, ctx, "listening event", func(e launch.Event) bool { return e.Event == launch.Listening })
	w0 := exec.Command(shoalBin, "worker", "--servers", up.Addr, "--rank", "0", "--world-size", "1",
		"--mode", "async", "--hidden", "16", "--dataset", "synthetic", "--batch", "16", "--steps", "100000000")
	out := lockedio.NewBuffer()
	w0.Stdout, w0.Stderr = out, out
	require.NoError(t, w0.Start())
	done := make(chan error, 1)
	go func() { done <- w0.Wait() }()
	t.Cleanup(func() {
		_ = w0.Process.Kill()
		err := <-done
		done <- err
	})
	require.True(t, poll(ctx, func() bool { return strings.Contains(out.String(), "epoch 1/") }), "the worker trained no epoch:\n%s", out)
	require.NoError(t, ps.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, ps.exit(t, ctx, "the shard"), "the shard after SIGTERM:\n%s", ps.stderr)
	require.NoError(t, w0.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-done:
		done <- err
		require.Error(t, err, "the worker evaluated nothing: exit 1\n%s", out)
	case <-ctx.Done():
		t.Fatalf("the worker did not exit:\n%s", out)
	}
	require.Regexp(t, `(?m)^test: not evaluated: stopped early by a signal, and pulling the final weights: `, out.String())
}
