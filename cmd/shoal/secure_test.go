package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/shoalml/shoal/client"
	"github.com/shoalml/shoal/launch"
	pb "github.com/shoalml/shoal/proto/shoalpb"
	"github.com/shoalml/shoal/ps"
	"github.com/shoalml/shoal/secure"
	"github.com/shoalml/shoal/shard"
)

// With shoal certs' files, a shard on a port beyond loopback serves a
// worker and a health probe that bring them, refuses a worker without the
// token (Unauthenticated, with the peer logged and counted), and health
// without TLS fails; it does not warn about serving in the clear.
func TestTLSAndTokenThroughTheCommandLine(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	dir := t.TempDir()
	out, err := exec.CommandContext(ctx, shoalBin, "certs", "--out", dir).CombinedOutput()
	require.NoError(t, err, "%s", out)
	creds := []string{"--tls-cert", filepath.Join(dir, "node.pem"), "--tls-key", filepath.Join(dir, "node-key.pem"), "--tls-ca", filepath.Join(dir, "ca.pem")}
	token := []string{"--auth-token-file", filepath.Join(dir, "token")}
	assert.Contains(t, string(out), strings.Join(append(creds, token...), " "))

	p := startProc(t, append(append([]string{"ps", "--events", "--hidden", "16", "--listen", ":0"}, creds...), token...)...)
	ev := p.next(t, ctx, "listening event", func(e launch.Event) bool { return e.Event == launch.Listening })
	_, port, err := net.SplitHostPort(ev.Addr)
	require.NoError(t, err)
	addr := net.JoinHostPort("127.0.0.1", port)

	shoal := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, shoalBin, args...).CombinedOutput()
		return string(out), err
	}
	out2, err := shoal(append(append([]string{"health"}, creds...), addr)...)
	require.NoError(t, err, out2)
	_, err = shoal("health", "--timeout", "1s", addr)
	require.Error(t, err, "health in plaintext against a TLS server")

	worker := []string{"worker", "--servers", addr, "--dataset", "synthetic", "--hidden", "16", "--steps", "10", "--connect-timeout", "10s"}
	out2, err = shoal(append(worker, creds...)...)
	require.Error(t, err)
	assert.Contains(t, out2, "code = Unauthenticated")
	assert.Contains(t, out2, "the call carried no bearer token")
	out2, err = shoal(append(append(worker, creds...), token...)...)
	require.NoError(t, err, out2)
	assert.Contains(t, out2, "10 steps")

	require.NoError(t, p.cmd.Process.Signal(os.Interrupt))
	require.NoError(t, p.exit(t, ctx, "shoal ps"))
	log := p.stderr.String()
	assert.Contains(t, log, `security="mutual TLS and a bearer token"`)
	assert.Regexp(t, `refused a call without the job's token" component=auth peer=127\.0\.0\.1:\d+ method=/shoal.v1.ParameterServer/Info`, log)
	assert.Contains(t, log, "unauthenticated=1")
	assert.NotContains(t, log, "no TLS and no authentication")
}

// shoal train --tls runs every mode over mutual TLS with a token: the
// shards serve over it, and the ring's rendezvous and TCP links (shared
// memory off, so that they carry the data) use it.
func TestTrainOverTLS(t *testing.T) {
	for _, mode := range []string{"async", "sync", "ssp", "ring"} {
		t.Run(mode, func(t *testing.T) {
			args := []string{"train", "--tls", "--mode", mode, "--dataset", "synthetic", "--workers", "2",
				"--hidden", "32", "--steps", "40", "--json", "--log-level", "info", "--shared-memory=false"}
			if mode != "ring" {
				args = append(args, "--servers", "2")
			}
			cmd := exec.CommandContext(ctxT(t, 2*time.Minute), shoalBin, args...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			require.NoError(t, err, "stderr: %s", stderr.String())
			sum := lastJSON(t, string(out))
			assert.Equal(t, mode, sum["mode"])
			assert.Greater(t, sum["test_accuracy"], 0.3)
			if mode != "ring" {
				assert.Equal(t, 2, strings.Count(stderr.String(), `security="mutual TLS and a bearer token"`), "both shards serve over TLS")
			}
		})
	}
}

// Five hundred hostile push streams (ten connections of fifty, each
// stream its header and then nothing) against a real shoal ps: a normal
// worker's steps go on while they are open, the server ends every one of
// them at its idle limit. The test logs the worker's median step and the
// server's resident memory before, during and after (docs/BENCHMARKS.md).
func TestFiveHundredHostileStreams(t *testing.T) {
	const idle = 3 * time.Second
	ctx := ctxT(t, 2*time.Minute)
	p := startProc(t, "ps", "--events", "--listen", "127.0.0.1:0", "--stream-idle-timeout", idle.String(), "--log-level", "warn")
	addr := p.next(t, ctx, "listening event", func(e launch.Event) bool { return e.Event == launch.Listening }).Addr
	rss := func() string {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
		require.NoError(t, err)
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "VmRSS:") {
				return strings.TrimSpace(strings.TrimPrefix(l, "VmRSS:"))
			}
		}
		return "?"
	}
	cl, err := client.Dial(ctx, []string{addr})
	require.NoError(t, err)
	defer cl.Close()
	n := cl.Info().Plan.VectorLen
	params, grads := make([]float32, n), make([]float32, n)
	var step int64
	steps := func(what string) time.Duration {
		var took []time.Duration
		for range 20 {
			start := time.Now()
			_, err := cl.PushPull(ctx, client.PushPullArgs{PushArgs: client.PushArgs{WorkerID: 0, Step: step, Grads: grads}, Pull: true, Dst: params})
			require.NoError(t, err, "%s: step %d", what, step)
			took = append(took, time.Since(start))
			step++
		}
		slices.Sort(took)
		return took[len(took)/2]
	}
	before, memBefore := steps("before"), rss()

	// The hostile streams are worker 1's, joined by the attacker: a
	// stream of a caller without the worker's session is refused at its
	// header, and these must get as far as the server's idle limit.
	joinConn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer joinConn.Close()
	joined, err := pb.NewParameterServerClient(joinConn).JoinWorker(ctx, &pb.JoinWorkerRequest{WorkerId: 1, PlanVersion: shard.Version})
	require.NoError(t, err)
	ended := make(chan error, 500)
	for range 10 {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		require.NoError(t, err)
		defer conn.Close()
		for range 50 {
			stream, err := pb.NewParameterServerClient(conn).Push(ctx)
			require.NoError(t, err)
			require.NoError(t, stream.Send(&pb.PushPiece{Header: &pb.PushHeader{WorkerId: 1, Session: joined.Session, PlanVersion: shard.Version, Ranges: []*pb.Range{{Offset: 0, Length: int64(n)}}}}))
			go func() {
				var resp pb.PushResponse
				ended <- stream.RecvMsg(&resp)
			}()
		}
	}
	opened := time.Now()
	during, memDuring := steps("during"), rss()
	for i := range 500 {
		select {
		case err := <-ended:
			require.Equal(t, codes.DeadlineExceeded, status.Code(err), "hostile stream %d: %v", i, err)
			require.ErrorContains(t, err, "stream idle limit")
		case <-ctx.Done():
			t.Fatalf("only %d of the 500 hostile streams were ended", i)
		}
	}
	endedAfter := time.Since(opened)
	after, memAfter := steps("after"), rss()
	t.Logf("a worker's median PushPull of %d floats: %v before, %v with 500 hostile streams open, %v after; the server's resident memory %s, %s, %s; all 500 ended by the server %v after they opened (idle limit %v)",
		n, before.Round(10*time.Microsecond), during.Round(10*time.Microsecond), after.Round(10*time.Microsecond), memBefore, memDuring, memAfter, endedAfter.Round(10*time.Millisecond), idle)
	require.NoError(t, p.cmd.Process.Signal(os.Interrupt))
	require.NoError(t, p.exit(t, ctx, "shoal ps"))
}

// TestElasticRingKeepsTheTokenOnLoopback: a ring worker with a token and
// no TLS refuses to serve its Elastic service beyond loopback, as shoal ps
// refuses (before, it listened on every interface, and its callers sent
// the token there in the clear).
func TestElasticRingKeepsTheTokenOnLoopback(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	dir := t.TempDir()
	out, err := exec.CommandContext(ctx, shoalBin, "certs", "--out", dir).CombinedOutput()
	require.NoError(t, err, "%s", out)
	out, err = exec.CommandContext(ctx, shoalBin, "worker", "--mode", "ring", "--rank", "0", "--world-size", "2", "--dataset", "synthetic", "--hidden", "16",
		"--steps", "1", "--auth-token-file", filepath.Join(dir, "token"), "--gossip-addr", "0.0.0.0:0").CombinedOutput()
	require.Error(t, err, "%s", out)
	assert.Contains(t, string(out), "elastic: the Elastic service: --auth-token-file without --tls-cert on ")
	assert.Contains(t, string(out), "the token would cross the network in the clear")
}

// TestAClientWithTheTokenCannotSpendAWorkersSteps is issue 44's item 4
// against real processes: a client holding the job's token pushes for
// worker 0 at step 1023 (the probe's attack: before, the real worker 0
// then joined at step 1024, trained 0 samples and exited 0). Pushed before
// the worker joined, the forged push binds worker 0 to the forger, as a
// join would, and is applied once; the worker's join then ends that
// binding and begins one step later, not after step 1023. Pushed while
// the worker trains, it is refused (PermissionDenied), counted by reason
// session, and the worker's run is untouched: every one of its steps
// applied once.
func TestAClientWithTheTokenCannotSpendAWorkersSteps(t *testing.T) {
	const steps, batch = 300, 16
	ctx := ctxT(t, 2*time.Minute)
	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("a-token-of-this-run-0123456789abcdef\n"), 0o600))
	p := startProc(t, "ps", "--events", "--hidden", "16", "--listen", "127.0.0.1:0", "--workers", "1", "--auth-token-file", tokenFile, "--log-level", "info")
	addr := p.next(t, ctx, "listening event", func(e launch.Event) bool { return e.Event == launch.Listening }).Addr
	creds, err := secure.Load(secure.Files{Token: tokenFile})
	require.NoError(t, err)
	forger, err := client.Dial(ctx, []string{addr}, client.WithDialOptions(creds.DialOptions()...))
	require.NoError(t, err)
	defer forger.Close()
	grads := make([]float32, forger.Info().Plan.VectorLen)
	for i := range grads {
		grads[i] = 1e-3
	}
	forge := func() error {
		_, err := forger.Push(ctx, client.PushArgs{WorkerID: 0, Step: ps.MaxStepGap - 1, Grads: grads})
		return err
	}
	require.NoError(t, forge(), "before the worker joined, worker 0 is the forger's to bind")

	w := startProc(t, "worker", "--servers", addr, "--auth-token-file", tokenFile, "--events", "--hidden", "16", "--dataset", "synthetic",
		"--batch", fmt.Sprint(batch), "--steps", fmt.Sprint(steps), "--log-level", "info")
	w.next(t, ctx, "the worker's progress", func(e launch.Event) bool { return e.Event == launch.Progress })
	err = forge()
	require.Error(t, err, "while the worker trains")
	assert.True(t, client.NotYours(err), "%v", err)
	assert.Contains(t, err.Error(), "not its current one")
	done := w.next(t, ctx, "the worker's done event", func(e launch.Event) bool { return e.Event == launch.Done })
	require.NoError(t, w.exit(t, ctx, "the worker"), "stderr:\n%s", w.stderr)
	assert.Equal(t, int64(steps), done.Steps)
	assert.Equal(t, (steps-1)*batch, done.Samples, "it began at step 1, after the forger's one push, not at step 1024")

	info, err := pb.NewParameterServerClient(dialT(t, addr, creds.DialOptions()...)).Info(ctx, &pb.InfoRequest{})
	require.NoError(t, err)
	assert.Equal(t, int64(steps), info.Clock, "the forger's push and each of the worker's %d, once", steps-1)
	assert.Zero(t, info.Stats.Duplicates, "no push of the worker taken for a duplicate")
	// Refused for its session: the forger's first push (worker 0 was not
	// bound yet: its client bound it and pushed again) and its push while
	// the worker trained.
	assert.Equal(t, int64(2), info.Stats.RejectedBy["session"])
	require.NoError(t, p.cmd.Process.Signal(os.Interrupt))
	require.NoError(t, p.exit(t, ctx, "shoal ps"))
	assert.Contains(t, p.stderr.String(), "taking it back so the worker does not skip its steps")
}
