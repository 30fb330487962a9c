package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/launch"
	pb "github.com/shoalml/shoal/proto/shoalpb"
)

// systemPython is the Python with Debian's python3-torch and python3-grpcio.
const systemPython = "/usr/bin/python3"

// pythonModules are what the Python client and its example import, with
// the Debian package of each.
var pythonModules = [][2]string{
	{"grpc", "python3-grpcio"}, {"google.protobuf", "python3-protobuf"}, {"numpy", "python3-numpy"}, {"torch", "python3-torch"},
}

// needPython skips t, saying what is missing, unless /usr/bin/python3 has
// every module the Python client needs; with SHOAL_REQUIRE_PYTHON=1 it
// fails t instead.
func needPython(t *testing.T) { needPythonModules(t, pythonModules) }

// needTorch is needPython for shoal.torch, which needs torch alone.
func needTorch(t *testing.T) { needPythonModules(t, [][2]string{{"torch", "python3-torch"}}) }

// needPythonModules skips t, saying what is missing, unless
// /usr/bin/python3 has every module of modules (name, Debian package);
// with SHOAL_REQUIRE_PYTHON=1 it fails t instead.
func needPythonModules(t *testing.T, modules [][2]string) {
	t.Helper()
	var missing, pkgs []string
	if _, err := os.Stat(systemPython); err != nil {
		missing, pkgs = []string{systemPython}, []string{"python3"}
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, m := range modules {
			// find_spec finds a module without importing it (torch takes seconds).
			probe := fmt.Sprintf("import importlib.util, sys; sys.exit(importlib.util.find_spec(%q) is None)", m[0])
			if exec.CommandContext(ctx, systemPython, "-c", probe).Run() != nil {
				missing, pkgs = append(missing, m[0]), append(pkgs, m[1])
			}
		}
	}
	if len(missing) == 0 {
		return
	}
	msg := fmt.Sprintf("%s lacks %s (apt-get install %s)", systemPython, strings.Join(missing, ", "), strings.Join(pkgs, " "))
	if os.Getenv("SHOAL_REQUIRE_PYTHON") == "1" {
		t.Fatalf("SHOAL_REQUIRE_PYTHON=1, but %s", msg)
	}
	t.Skipf("SKIP: %s; SHOAL_REQUIRE_PYTHON=1 makes this a failure", msg)
}

// pythonResult is the JSON line clients/python/examples/train_mlp.py ends with.
type pythonResult struct {
	Worker       int     `json:"worker"`
	Mode         string  `json:"mode"`
	Steps        int64   `json:"steps"`
	Pushes       int64   `json:"pushes"`
	Duplicates   int64   `json:"duplicates"`
	Dropped      int64   `json:"dropped"`
	TestAccuracy float64 `json:"test_accuracy"`
	Clocks       []int64 `json:"clocks"`
}

// TestPythonWorker runs a job of two `shoal ps` shards, one Go `shoal
// worker` and the PyTorch worker of clients/python/examples on
// Fashion-MNIST, in async and in sync mode, and checks that the Python
// worker's pushes were applied (sync: every step needs both workers'
// pushes; async: every push is an update) and that the job converges.
func TestPythonWorker(t *testing.T) {
	needPython(t)
	if _, err := os.Stat(fashionDir + "/train-images-idx3-ubyte.gz"); err != nil {
		t.Skipf("Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist): %v", err)
	}
	script, err := filepath.Abs("../../clients/python/examples/train_mlp.py")
	require.NoError(t, err)
	const steps = 200
	for _, mode := range []string{"async", "sync"} {
		t.Run(mode, func(t *testing.T) {
			ctx := ctxT(t, 3*time.Minute)
			var addrs []string
			var shards []pb.ParameterServerClient
			for s := range 2 {
				ps := startProc(t, "ps", "--listen", "127.0.0.1:0", "--events", "--servers", "2", "--shard", fmt.Sprint(s),
					"--workers", "2", "--mode", mode, "--log-level", "warn")
				addr := ps.next(t, ctx, "listening event", func(e launch.Event) bool { return e.Event == launch.Listening }).Addr
				addrs = append(addrs, addr)
				shards = append(shards, pb.NewParameterServerClient(dialT(t, addr)))
			}
			servers := strings.Join(addrs, ",")

			goWorker := startProc(t, "worker", "--servers", servers, "--mode", mode, "--rank", "0", "--world-size", "2",
				"--steps", fmt.Sprint(steps), "--threads", "1", "--events", "--call-timeout", "60s")
			py := exec.CommandContext(ctx, systemPython, script, "--servers", servers, "--mode", mode, "--rank", "1", "--world-size", "2",
				"--steps", fmt.Sprint(steps), "--threads", "1", "--data", fashionDir, "--json")
			py.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
			var pyOut, pyErr bytes.Buffer
			py.Stdout, py.Stderr = &pyOut, &pyErr
			require.NoError(t, py.Start())
			pyDone := make(chan error, 1)
			go func() { pyDone <- py.Wait() }()
			pyExited := false
			t.Cleanup(func() {
				if !pyExited {
					_ = py.Process.Kill()
					<-pyDone
				}
			})

			// Whichever ends first: a failure of either stops the test at
			// once (in sync mode the other would wait for it).
			goDone := goWorker.done
			for !pyExited || goDone != nil {
				select {
				case err := <-pyDone:
					pyExited = true
					require.NoError(t, err, "the Python worker failed; its stderr:\n%s", pyErr.String())
				case err := <-goDone:
					goWorker.done <- err // for the cleanup
					goDone = nil
					require.NoError(t, err, "the Go worker failed; its stderr:\n%s", goWorker.stderr)
				case <-ctx.Done():
					t.Fatalf("the workers did not finish before the deadline; Python's stderr:\n%s\nGo's stderr:\n%s", pyErr.String(), goWorker.stderr)
				}
			}
			done := goWorker.next(t, ctx, "the Go worker's done event", func(e launch.Event) bool { return e.Event == launch.Done })
			require.EqualValues(t, steps, done.Steps)

			lines := strings.Split(strings.TrimSpace(pyOut.String()), "\n")
			var res pythonResult
			require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &res), "Python's stdout:\n%s\nstderr:\n%s", pyOut.String(), pyErr.String())
			t.Logf("python worker: %+v", res)
			assert.Equal(t, mode, res.Mode)
			assert.EqualValues(t, steps, res.Pushes)
			assert.Zero(t, res.Duplicates)
			assert.Zero(t, res.Dropped)

			// Every push of both workers was applied: in sync mode a step
			// (the clock) completes only once both pushed it; in async mode
			// each push is one update.
			wantClock := int64(steps)
			if mode == "async" {
				wantClock = done.Steps + res.Pushes
			}
			for s, sh := range shards {
				info, err := sh.Info(ctx, &pb.InfoRequest{})
				require.NoError(t, err)
				st := info.GetStats()
				assert.Equal(t, wantClock, info.Clock, "shard %d's clock", s)
				assert.EqualValues(t, 2*steps, st.GetPushes(), "shard %d's applied pushes", s)
				assert.Zero(t, st.GetRejected(), "shard %d refused pushes: %v", s, st.GetRejectedBy())
				assert.Zero(t, st.GetDuplicates(), "shard %d", s)
				assert.Zero(t, st.GetShortSteps(), "shard %d", s)
			}

			// The job converges: the final weights, pulled by the Python
			// worker after its last push (sync: once that step was
			// applied; async: the Go worker may still be pushing),
			// classify most of the test set. 200 steps of batch 64 reach
			// about 82% in either mode.
			require.Len(t, res.Clocks, 2)
			for s, c := range res.Clocks {
				if mode == "sync" {
					assert.Equal(t, wantClock, c, "shard %d's clock at the Python worker's final pull", s)
				} else {
					assert.True(t, c >= res.Pushes && c <= wantClock, "shard %d's clock %d at the Python worker's final pull: want %d..%d", s, c, res.Pushes, wantClock)
				}
			}
			assert.Greater(t, res.TestAccuracy, 0.75, "test accuracy after %d steps of each worker", steps)
		})
	}
}
