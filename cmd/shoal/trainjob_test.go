package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/shoalml/shoal/internal/lockedio"
	"github.com/shoalml/shoal/launch"
)

// childEnv, set, makes this test binary a shoal process (TestMain): the
// children of the jobs that run in the test process are this binary.
const childEnv = "SHOAL_TEST_CHILD"

// childMain is main's body for this test binary as a child: run with the
// process's streams, SIGINT and SIGTERM cancelling it, its exit code.
func childMain(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, args, os.Stdin, os.Stdout, os.Stderr)
	stop()
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case !errors.Is(err, errUsage):
		fmt.Fprintln(os.Stderr, "shoal:", err)
	}
	return exitCode(err)
}

// TestTrainJobInProcess runs shoal train's job in this test process,
// through launch.RunJob, with the configuration shoal train builds from
// its flags; the children are this test binary playing shoal ps and shoal
// worker. At the first epoch's end the test SIGKILLs a child from the
// job's Observe hook: shard 1 of a sync run with a journal, which the job
// restarts from its checkpoint on its address and the run finishes every
// step; or worker 1 of an async run, which the others finish without
// (a membership change, not a failure).
func TestTrainJobInProcess(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("SIGKILL as the death of a child from outside is Linux's (Unix's) signal")
	}
	t.Setenv(childEnv, "1")
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	common := []string{"--dataset", "synthetic", "--hidden", "32", "--steps", "300", "--optimizer", "momentum", "--lr", "0.05", "--test=false"}
	for _, tc := range []struct {
		name string
		args []string
		kill string // the child killed at the first epoch's end
		want string // what the job prints about it
	}{
		{"a killed shard is restarted", []string{"--mode", "sync", "--workers", "2", "--servers", "2", "--checkpoint-every", "50", "--journal"},
			"ps 1", "ps 1 was killed (signal: killed); restarted from its checkpoint on 127.0.0.1:"},
		{"a killed worker leaves the others training", []string{"--mode", "async", "--workers", "3", "--servers", "1"},
			"worker 1", "worker 1 was killed (signal: killed)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(tc.args, common...)
			if tc.kill == "ps 1" {
				args = append(args, "--checkpoint-dir", filepath.Join(t.TempDir(), "ckpt"))
			}
			var stdout bytes.Buffer
			stderr := lockedio.NewBuffer()
			tr, err := parseTrain(args, stderr)
			require.NoError(t, err)
			cfg, err := tr.jobConfig(&stdout, stderr)
			require.NoError(t, err)

			children := map[string]*launch.Child{}
			cfg.Started = func(c *launch.Child) { children[c.Name()] = c }
			killed := false
			cfg.Observe = func(m launch.Message) {
				if !killed && m.Event.Event == launch.Progress && m.Event.EpochDone {
					require.Contains(t, children, tc.kill)
					require.NoError(t, children[tc.kill].Kill())
					killed = true
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			res, err := launch.RunJob(ctx, cfg)
			require.NoError(t, err, "stdout:\n%s\nstderr:\n%s", &stdout, stderr)
			require.True(t, killed, "no epoch ended before the run did:\n%s", &stdout)
			assert.Contains(t, stdout.String(), tc.want)
			assert.Empty(t, res.Failures, "a child killed from outside is no failure")
			sum := res.Result
			if tc.kill == "ps 1" {
				require.NotEmpty(t, sum.MembershipEvents)
				assert.Equal(t, launch.MembershipEvent{Role: "ps", Rank: 1, Change: "restarted", Seconds: sum.MembershipEvents[0].Seconds, Cause: "signal: killed"},
					sum.MembershipEvents[0])
				assert.Equal(t, int64(300), sum.Steps, "every step ran, the restarted shard's too")
				assert.Empty(t, sum.FailedWorkers)
			} else {
				assert.Equal(t, []int{1}, sum.FailedWorkers)
				assert.Equal(t, int64(300), sum.Steps, "the others ran to the end")
			}
		})
	}
}

// TestTheRunHasAGossipKeyOfItsOwn: shoal train gives its children a
// gossip key made for the run (32 random bytes, 0600, in a folder of its
// own that the run removes), so that a local process without it cannot
// join the run's gossip and announce a shard at an address of its own
// (issue 44: it moved every worker to 127.0.0.1:1). That memberlist
// refuses a member without the key is cluster's TestMembershipLoopback.
func TestTheRunHasAGossipKeyOfItsOwn(t *testing.T) {
	var stderr bytes.Buffer
	tr, err := parseTrain([]string{"--dataset", "synthetic", "--hidden", "32", "--steps", "3", "--mode", "sync", "--workers", "2"}, &stderr)
	require.NoError(t, err, stderr.String())
	cleanup, err := tr.prepare()
	require.NoError(t, err)
	key := tr.gossipKey
	st, err := os.Stat(key)
	require.NoError(t, err)
	assert.Equal(t, int64(32), st.Size())
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	assert.Contains(t, tr.shardArgs(0, "127.0.0.1:0", nil, 0), "--gossip-key-file="+key)
	assert.Contains(t, tr.workerArgs(1, []string{"127.0.0.1:1"}, []string{"127.0.0.1:2"}, ""), "--gossip-key-file="+key)

	other, err := parseTrain([]string{"--dataset", "synthetic", "--hidden", "32", "--steps", "3"}, &stderr)
	require.NoError(t, err)
	cleanupOther, err := other.prepare()
	require.NoError(t, err)
	defer cleanupOther()
	a, err := os.ReadFile(key)
	require.NoError(t, err)
	b, err := os.ReadFile(other.gossipKey)
	require.NoError(t, err)
	assert.NotEqual(t, a, b, "each run its own key")

	cleanup()
	_, err = os.Stat(filepath.Dir(key))
	assert.True(t, os.IsNotExist(err), "the run removes its key: %v", err)
}

// TestTheShardsGetTheUpdateRuleAndTheScalingRule: shoal train gives its
// shards the update rule and --scale-lr with its warm-up, an epoch of
// their updates (async: one per push).
func TestTheShardsGetTheUpdateRuleAndTheScalingRule(t *testing.T) {
	var stderr bytes.Buffer
	tr, err := parseTrain([]string{"--dataset", "synthetic", "--hidden", "32", "--mode", "async", "--workers", "4", "--update-rule", "staleness", "--scale-lr"}, &stderr)
	require.NoError(t, err, stderr.String())
	steps := ((tr.train.Len()+3)/4 + 63) / 64 // a worker's steps in an epoch
	args := tr.shardArgs(0, "127.0.0.1:0", nil, 0)
	assert.Subset(t, args, []string{"--update-rule=staleness", "--scale-lr=true", "--workers=4", fmt.Sprintf("--warmup-steps=%d", 4*steps)})

	_, err = parseTrain([]string{"--dataset", "synthetic", "--update-rule", "fast"}, &stderr)
	assert.ErrorContains(t, err, `--update-rule: update rule "fast": unknown`)
	_, err = parseTrain([]string{"--dataset", "synthetic", "--mode", "ring", "--update-rule", "full"}, &stderr)
	assert.ErrorContains(t, err, "--update-rule")
}
