package launch

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/internal/lockedio"
)

// fakeJob is a job of this test binary's fake children: one server
// ("listen"), worker 0 that runs an epoch and finishes when told
// ("worker-told"), worker 1 that serves until it is stopped ("silent").
// At worker 0's epoch, the Observe hook SIGKILLs worker 1, and server 0
// once worker 1's exit is taken; once the job says it restarted the
// server, worker 0 is told to finish (so that the job cannot end before
// the deaths are taken, whatever the machine's load). It returns the config and the
// argv each server was started with.
func fakeJob(t *testing.T, stdout *bytes.Buffer) (JobConfig, *[][]string) {
	exe, err := os.Executable()
	require.NoError(t, err)
	var serverArgs [][]string
	children := map[string]*Child{}
	killed := false
	// The job says a restart once it is done: then worker 0 may finish.
	out := onWrite{w: stdout, see: "restarted from its checkpoint", then: func() { children["worker 0"].Tell("finish") }}
	cfg := DefaultJobConfig(exe, out, lockedio.NewBuffer())
	cfg.Servers, cfg.Workers = 1, 2
	cfg.ServerArgs = func(shard int, listen string, join []string, restart int) []string {
		serverArgs = append(serverArgs, []string{listen, string(rune('0' + restart))})
		return nil
	}
	cfg.WorkerArgs = func(int, []string, []string, string) []string { return nil }
	cfg.WorkerEnv = func(rank int, _ []string) []string {
		return []string{fakeEnv + "=" + map[int]string{0: "worker-told", 1: "silent"}[rank]}
	}
	cfg.Started = func(c *Child) { children[c.Name()] = c }
	cfg.Observe = func(m Message) {
		switch {
		case !killed && m.Event.Event == Progress:
			require.NoError(t, children["worker 1"].Kill())
			killed = true
		case m.Exit && m.From == children["worker 1"]:
			// One death at a time: a death while a server
			// restarts ends the job.
			require.NoError(t, children["ps 0"].Kill())
		}
	}
	return cfg, &serverArgs
}

// onWrite writes to w and calls then after each write that holds see.
type onWrite struct {
	w    io.Writer
	see  string
	then func()
}

func (o onWrite) Write(p []byte) (int, error) {
	n, err := o.w.Write(p)
	if strings.Contains(string(p), o.see) {
		o.then()
	}
	return n, err
}

// ctxTimeout bounds a fake job.
const ctxTimeout = 30 * time.Second

// TestJob runs a job of fake children in which a worker and a server are
// killed from outside: the worker's death is a membership change the
// other finishes after; the server is restarted on its address where the
// policy allows, and its death ends the job where it does not.
func TestJob(t *testing.T) {
	t.Setenv(fakeEnv, "listen") // the servers; the workers' env says otherwise
	for _, tc := range []struct {
		name        string
		maxRestarts int
		wantErr     string
	}{
		{"the server restarted", 1, ""},
		{"the server's death ends the job", 0, "ps 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout bytes.Buffer
			cfg, serverArgs := fakeJob(t, &stdout)
			cfg.MaxRestarts = tc.maxRestarts
			finished := false
			cfg.Finish = func(_ context.Context, j *JobResult) error {
				finished = true
				return nil
			}
			res, err := RunJob(ctxT(t, ctxTimeout), cfg)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				assert.False(t, finished)
				return
			}
			require.NoError(t, err, "stdout:\n%s", &stdout)
			assert.True(t, finished)
			assert.Equal(t, [][]string{{"127.0.0.1:0", "0"}, {"127.0.0.1:7070", "1"}}, *serverArgs, "restarted on its address")
			assert.Contains(t, stdout.String(), "worker 1 was killed (signal: killed)\n")
			assert.Contains(t, stdout.String(), "ps 0 was killed (signal: killed); restarted from its checkpoint on 127.0.0.1:7070\n")
			assert.Contains(t, stdout.String(), "epoch 1/1  loss 1.0000  accuracy  50.00%")
			assert.Equal(t, []int{1}, res.Result.FailedWorkers)
			assert.Empty(t, res.Failures, "killed from outside: no failure")
			require.Len(t, res.Result.MembershipEvents, 1)
			assert.Equal(t, "restarted", res.Result.MembershipEvents[0].Change)
			assert.Equal(t, int64(10), res.Result.Steps)
			assert.Equal(t, []string{"127.0.0.1:7070"}, res.Servers)
			assert.Equal(t, 1, res.Result.Epochs)
		})
	}
}

func TestJobConfigValidates(t *testing.T) {
	_, err := RunJob(context.Background(), JobConfig{Exe: "shoal", Workers: 0})
	assert.ErrorContains(t, err, "0 workers, want >= 1")
	var out bytes.Buffer
	cfg := DefaultJobConfig("shoal", &out, &out)
	cfg.Workers, cfg.GroupSize = 3, 2
	cfg.WorkerArgs = func(int, []string, []string, string) []string { return nil }
	_, err = RunJob(context.Background(), cfg)
	assert.ErrorContains(t, err, "3 workers in groups of 2: want groups of 0 or more that divide the workers")
}

// TestARingReformIsAMembershipEvent: a ring's re-form with the same
// members, as its new rank 0 reports it, is one of the run's membership
// events (membership_events), with its reason as the cause, and is
// printed as the re-form it is.
func TestARingReformIsAMembershipEvent(t *testing.T) {
	var out bytes.Buffer
	cfg := DefaultJobConfig("shoal", &out, io.Discard)
	j := &job{cfg: &cfg, tally: &Tally{Result: cfg.Result}, board: NewBoard(&out, 3, false), cause: map[int]string{}, done: map[int]bool{}, start: time.Now()}
	j.memberChanged(Event{Event: Member, Role: RingRole, Change: Reformed, Steps: 40, Live: 3, Reason: "collective: peer 2: connection reset"})
	j.memberChanged(Event{Event: Member, Role: "worker", Rank: 1, Change: "joined", Steps: 0, Live: 3}) // the run's start: no change

	evs := j.tally.Result.MembershipEvents
	require.Len(t, evs, 1)
	assert.Equal(t, MembershipEvent{Role: RingRole, Change: Reformed, Step: 40, Live: 3, Seconds: evs[0].Seconds, Cause: "collective: peer 2: connection reset"}, evs[0])
	assert.Equal(t, "the ring re-formed with the same members at step 40 (collective: peer 2: connection reset); 3 workers go on\n", out.String())
}
