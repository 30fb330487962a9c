package main

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/launch"
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

// shoal train --tls runs every parameter-server mode over mutual TLS with
// a token, and refuses ring mode, which does not speak TLS yet.
func TestTrainOverTLS(t *testing.T) {
	for _, mode := range []string{"async", "sync", "ssp"} {
		t.Run(mode, func(t *testing.T) {
			cmd := exec.CommandContext(ctxT(t, 2*time.Minute), shoalBin, "train", "--tls", "--mode", mode, "--dataset", "synthetic", "--workers", "2", "--servers", "2",
				"--hidden", "32", "--steps", "40", "--json", "--log-level", "info")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			require.NoError(t, err, "stderr: %s", stderr.String())
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			var sum map[string]any
			require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &sum))
			assert.Equal(t, mode, sum["mode"])
			assert.Greater(t, sum["test_accuracy"], 0.3)
			assert.Equal(t, 2, strings.Count(stderr.String(), `security="mutual TLS and a bearer token"`), "both shards serve over TLS")
		})
	}
	out, err := exec.CommandContext(ctxT(t, time.Minute), shoalBin, "train", "--tls", "--mode", "ring", "--dataset", "synthetic").CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "ring mode's rendezvous and data plane do not speak TLS yet")
}
