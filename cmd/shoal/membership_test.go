package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/internal/lockedio"
	"github.com/shoalml/shoal/launch"
)

const fashionDir = "/usr/share/datasets/fashion-mnist"

// trainJSON runs shoal train with args and --json. With kill, it SIGKILLs
// worker 1 once the first epoch line shows. It returns the run's summary
// and its stdout.
func trainJSON(t *testing.T, kill bool, args ...string) (launch.Result, string) {
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
	killed := !kill
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if !killed && strings.HasPrefix(sc.Text(), "epoch 1/") {
			require.NoError(t, syscall.Kill(childWith(t, cmd.Process.Pid, "--rank", "1"), syscall.SIGKILL))
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
// reports the death, and the final accuracy is within a point of the same
// run undisturbed. In async mode nobody waited for worker 1 anyway.
func TestAKilledWorkerLeavesTheOthersTraining(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("finds the launcher's children through /proc, which only Linux has")
	}
	if _, err := os.Stat(fashionDir + "/train-images-idx3-ubyte.gz"); err != nil {
		t.Skipf("Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist): %v", err)
	}
	for _, mode := range []string{"sync", "ssp", "async"} {
		t.Run(mode, func(t *testing.T) {
			args := []string{"--mode", mode, "--workers", "3", "--epochs", "3", "--hidden", "128", "--lr", "0.02"}
			undisturbed, _ := trainJSON(t, false, args...)
			res, out := trainJSON(t, true, args...)
			assert.Empty(t, undisturbed.MembershipEvents)
			assert.Contains(t, out, "worker 1 was killed (signal: killed)")
			if mode == "async" && len(res.MembershipEvents) == 0 {
				// Nobody waits for a dead async worker: the run may end
				// before gossip declares it dead.
				t.Log("async: the run ended before shard 0 saw worker 1 die")
			} else {
				require.Len(t, res.MembershipEvents, 1, "%s", out)
				ev := res.MembershipEvents[0]
				assert.Equal(t, launch.MembershipEvent{Role: "worker", Rank: 1, Change: "died", Step: ev.Step, Live: 2, Seconds: ev.Seconds, Cause: "signal: killed"}, ev)
				assert.Positive(t, ev.Step)
				assert.Less(t, ev.Step, res.Steps)
				assert.Contains(t, out, fmt.Sprintf("worker 1 died at step %d (signal: killed); 2 workers go on", ev.Step))
			}
			assert.Equal(t, []int{1}, res.FailedWorkers)
			assert.Equal(t, undisturbed.Steps, res.Steps, "the survivors ran the whole run")
			assert.InDelta(t, undisturbed.TestAccuracy, res.TestAccuracy, 0.01, "final test accuracy")
			t.Logf("%s: test accuracy %.4f undisturbed, %.4f with worker 1 killed: %+v", mode, undisturbed.TestAccuracy, res.TestAccuracy, res.MembershipEvents)
		})
	}
}
