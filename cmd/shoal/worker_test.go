package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/shoalml/shoal/flags"
	"github.com/shoalml/shoal/internal/lockedio"
	"github.com/shoalml/shoal/launch"
)

// TestWorkerStopsOnTheStdinItIsHanded runs a parameter server and a
// worker in this process, the worker with --events as under a launcher:
// a "stop" line on the stdin run is handed ends its run cleanly, and
// nothing either started is left running once they return.
func TestWorkerStopsOnTheStdinItIsHanded(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx := ctxT(t, time.Minute)

	psCtx, stopPS := context.WithCancel(ctx)
	psOut := newEventWriter()
	psDone := make(chan error, 1)
	go func() {
		psDone <- run(psCtx, []string{"ps", "--listen", "127.0.0.1:0", "--events", "--hidden", "16"}, nil, psOut, io.Discard)
	}()
	defer func() {
		stopPS()
		assert.NoError(t, <-psDone, "ps")
	}()
	addr := psOut.next(t, ctx, launch.Listening).Addr

	stdin, launcher, err := os.Pipe()
	require.NoError(t, err)
	defer stdin.Close()
	defer launcher.Close()
	out := newEventWriter()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"worker", "--servers", addr, "--events", "--hidden", "16", "--dataset", "synthetic",
			"--batch", "16", "--steps", "100000000", "--rank", "0", "--world-size", "1", "--threads", "1"}, stdin, out, io.Discard)
	}()
	out.next(t, ctx, launch.Progress)
	_, err = fmt.Fprintln(launcher, launch.Stop)
	require.NoError(t, err)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-ctx.Done():
		t.Fatal("the worker did not stop on the stop line of its stdin")
	}
	assert.True(t, out.next(t, ctx, launch.Done).Stopped)
}

// TestWorkerTakesTheServersMode runs a sync parameter server and workers
// in this process: a worker given no --mode trains in the servers' mode
// and says so; one given another mode, or async's flags the servers'
// mode cannot run, is refused, saying why.
func TestWorkerTakesTheServersMode(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx := ctxT(t, time.Minute)
	psCtx, stopPS := context.WithCancel(ctx)
	psOut := newEventWriter()
	psDone := make(chan error, 1)
	go func() {
		psDone <- run(psCtx, []string{"ps", "--listen", "127.0.0.1:0", "--events", "--hidden", "16", "--mode", "sync", "--workers", "1"}, nil, psOut, io.Discard)
	}()
	defer func() {
		stopPS()
		assert.NoError(t, <-psDone, "ps")
	}()
	addr := psOut.next(t, ctx, launch.Listening).Addr
	worker := func(args ...string) (string, error) {
		stderr := lockedio.NewBuffer()
		err := run(ctx, append([]string{"worker", "--servers", addr, "--hidden", "16", "--dataset", "synthetic", "--batch", "16", "--steps", "3",
			"--rank", "0", "--world-size", "1", "--threads", "1", "--eval=false"}, args...), nil, io.Discard, stderr)
		return stderr.String(), err
	}

	_, err := worker("--mode", "async")
	require.ErrorContains(t, err, "--mode async: the servers run mode sync", "a mode given is the user's: refused where it differs")
	_, err = worker("--push-every", "2")
	require.ErrorContains(t, err, "the servers run mode sync, which pulls and pushes every step: --push-every 2, --fetch-every 1 and --overlap-push-pull are for --mode async")

	stderr, err := worker()
	require.NoError(t, err, "no --mode: the servers' (stderr: %s)", stderr)
	assert.Contains(t, stderr, `msg="no --mode given: taking the servers' mode"`)
	assert.Contains(t, stderr, "mode=sync")
}

// eventWriter is a child's stdout in this process: each Write is one
// event line (launch.Emit), queued for next. It never blocks the writer:
// events beyond what the queue holds are dropped.
type eventWriter struct{ events chan launch.Event }

func newEventWriter() *eventWriter { return &eventWriter{events: make(chan launch.Event, 1024)} }

func (w *eventWriter) Write(p []byte) (int, error) {
	var ev launch.Event
	if json.Unmarshal(p, &ev) == nil {
		select {
		case w.events <- ev:
		default:
		}
	}
	return len(p), nil
}

// next waits for the next event of the kind.
func (w *eventWriter) next(t *testing.T, ctx context.Context, kind string) launch.Event {
	t.Helper()
	for {
		select {
		case ev := <-w.events:
			if ev.Event == kind {
				return ev
			}
		case <-ctx.Done():
			t.Fatalf("no %s event before the deadline", kind)
		}
	}
}

// A worker's Go runtime gets its share of the cores as GOMAXPROCS, never
// more Ps than the machine has cores, whatever --threads says; OpenBLAS
// gets --threads as it is.
func TestWorkerEnvNeverGivesMorePsThanCores(t *testing.T) {
	cores := runtime.NumCPU()
	assert.Equal(t, []string{"OPENBLAS_NUM_THREADS=1", "GOMAXPROCS=1"}, workerEnv(1, true))
	assert.Equal(t, []string{"OPENBLAS_NUM_THREADS=100000", "GOMAXPROCS=" + strconv.Itoa(cores)}, workerEnv(100000, true))
	assert.Equal(t, []string{"OPENBLAS_NUM_THREADS=100000"}, workerEnv(100000, false), "ring workers keep the runtime's own")
}

// shoal train's gossip takes the LAN's timings once its processes
// outnumber the cores maxLoopbackProcsPerCore to one.
func TestTrainDetectionFollowsTheLoad(t *testing.T) {
	limit := maxLoopbackProcsPerCore * runtime.NumCPU()
	assert.Equal(t, "loopback", (&trainRun{workers: 2, shard: flags.Shard{Servers: 1}}).detection())
	assert.Equal(t, "loopback", (&trainRun{workers: 2, shard: flags.Shard{Servers: limit - 2}}).detection())
	assert.Equal(t, "lan", (&trainRun{workers: 2, shard: flags.Shard{Servers: limit - 1}}).detection())
	assert.Equal(t, "loopback", (&trainRun{workers: limit, ring: true}).detection())
	assert.Equal(t, "lan", (&trainRun{workers: limit + 1, ring: true}).detection())
}
