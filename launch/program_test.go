//go:build linux

package launch

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/secure"
)

// lineLog keeps the lines written to it, one a Write (as a prefixWriter
// writes them), and shows each to see, if set, as it arrives.
type lineLog struct {
	mu    sync.Mutex
	lines []string
	see   func(line string)
}

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	line := strings.TrimSuffix(string(p), "\n")
	l.lines = append(l.lines, line)
	if l.see != nil {
		l.see(line)
	}
	return len(p), nil
}

// of is what rank wrote on stream ("stdout", "stderr"), its prefix cut.
func (l *lineLog) of(rank int, stream string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	prefix := "[" + strconv.Itoa(rank) + "]<" + stream + ">:"
	var out []string
	for _, line := range l.lines {
		if s, ok := strings.CutPrefix(line, prefix); ok {
			out = append(out, s)
		}
	}
	return out
}

func (l *lineLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// whenAll calls then once every line of want has been seen.
func whenAll(then func(), want ...string) func(string) {
	left := map[string]bool{}
	for _, w := range want {
		left[w] = true
	}
	return func(line string) {
		if left[line] {
			delete(left, line)
			if len(left) == 0 {
				then()
			}
		}
	}
}

// programConfig is a run of np copies of sh -c script, in a ring.
func programConfig(np int, script string, stdout, stderr *lineLog) ProgramConfig {
	return DefaultProgramConfig([]string{"sh", "-c", script}, np, stdout, stderr)
}

// TestProgramEnv: every rank gets the environment of the contract, in a
// ring and in a parameter-server mode, whose shards (fake ones of this
// test binary) start first with the argv ServerArgs builds, on the file
// SHOAL_PS_INIT names, in a 0700 folder that goes with the run.
func TestProgramEnv(t *testing.T) {
	t.Setenv(fakeEnv, "shard") // the shards; sh does not mind it
	exe, err := os.Executable()
	require.NoError(t, err)
	for _, tc := range []struct {
		name    string
		mode    consistency.Mode
		servers int
		sec     secure.Files
		local   int
		comp    string
	}{
		{name: "ring", mode: consistency.Ring},
		{name: "sync, 2 shards, TLS and a token", mode: consistency.Sync, servers: 2,
			sec: secure.Files{CA: "/c/ca.pem", Cert: "/c/node.pem", Key: "/c/node.key", Token: "/c/token"}},
		{name: "async, local steps", mode: consistency.Async, servers: 1, local: 8},
		{name: "sync, local steps in int8", mode: consistency.Sync, servers: 1, local: 4, comp: "int8"},
		{name: "sync, compression none", mode: consistency.Sync, servers: 1, comp: "none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr lineLog
			cfg := programConfig(2, "env", &stdout, &stderr)
			cfg.Mode, cfg.Servers, cfg.Exe, cfg.Sec, cfg.LocalSteps, cfg.Compression = tc.mode, tc.servers, exe, tc.sec, tc.local, tc.comp
			type call struct {
				shard        int
				listen, init string
				perm         os.FileMode
			}
			var calls []call
			cfg.ServerArgs = func(shard int, listen, initFrom string) []string {
				st, err := os.Stat(filepath.Dir(initFrom))
				require.NoError(t, err)
				calls = append(calls, call{shard, listen, initFrom, st.Mode().Perm()})
				return []string{"--shard=" + strconv.Itoa(shard)}
			}
			require.NoError(t, RunProgram(ctxT(t, time.Minute), cfg), "stderr:\n%s", &stderr)

			envs := make([]map[string]string, 2)
			for r := range envs {
				envs[r] = map[string]string{}
				for _, kv := range stdout.of(r, "stdout") {
					if k, v, ok := strings.Cut(kv, "="); ok {
						envs[r][k] = v
					}
				}
			}
			for r, env := range envs {
				assert.Equal(t, strconv.Itoa(r), env["SHOAL_RANK"], "rank %d", r)
				assert.Equal(t, "2", env["SHOAL_WORLD_SIZE"], "rank %d", r)
				assert.Equal(t, strconv.Itoa(r), env["SHOAL_LOCAL_RANK"], "rank %d", r)
				assert.Equal(t, "2", env["SHOAL_LOCAL_SIZE"], "rank %d", r)
				assert.Regexp(t, `^127\.0\.0\.1:[1-9][0-9]*$`, env["SHOAL_MASTER"], "rank %d", r)
				assert.Regexp(t, `^[0-9a-f]{16}$`, env["SHOAL_JOB_ID"], "rank %d", r)
				assert.Equal(t, tc.mode.String(), env["SHOAL_MODE"], "rank %d", r)
				if h, ok := env["SHOAL_LOCAL_STEPS"]; tc.local > 0 || ok {
					assert.Equal(t, strconv.Itoa(tc.local), h, "rank %d: SHOAL_LOCAL_STEPS only with local steps", r)
				}
				if c, ok := env["SHOAL_COMPRESSION"]; tc.comp == "int8" || ok {
					assert.Equal(t, "int8", c, "rank %d: SHOAL_COMPRESSION only when not none", r)
				}
				for k, want := range map[string]string{"SHOAL_TLS_CA": tc.sec.CA, "SHOAL_TLS_CERT": tc.sec.Cert, "SHOAL_TLS_KEY": tc.sec.Key, "SHOAL_AUTH_TOKEN_FILE": tc.sec.Token} {
					got, ok := env[k]
					assert.Equal(t, want != "", ok, "rank %d: %s set only where its flag was given", r, k)
					assert.Equal(t, want, got, "rank %d: %s", r, k)
				}
			}
			for _, k := range []string{"SHOAL_MASTER", "SHOAL_JOB_ID", "SHOAL_PS_INIT"} {
				assert.Equal(t, envs[0][k], envs[1][k], "%s: the run's, the same for every rank", k)
			}
			if tc.servers == 0 {
				assert.Empty(t, calls, "no servers in a ring")
				assert.NotContains(t, envs[0], "SHOAL_SERVERS")
				assert.NotContains(t, envs[0], "SHOAL_PS_INIT")
				return
			}
			init := envs[0]["SHOAL_PS_INIT"]
			require.NotEmpty(t, init)
			if tc.servers == 2 {
				assert.Equal(t, []call{{0, "127.0.0.1:0", init, 0o700}, {1, "127.0.0.1:0", init, 0o700}}, calls,
					"the shards on free ports, on the file the ranks are told of, in a folder of the run's own")
				assert.Equal(t, "127.0.0.1:7070,127.0.0.1:7071", envs[0]["SHOAL_SERVERS"], "the shards' addresses, shard order")
			}
			assert.NoDirExists(t, filepath.Dir(init), "removed with the run")
		})
	}
}

// TestProgramOutput: each line a rank writes is passed through whole,
// prefixed with its rank and stream, a line that looks like an event
// included and a last one without its newline.
func TestProgramOutput(t *testing.T) {
	var stdout, stderr lineLog
	cfg := programConfig(2, `echo out; echo err >&2; echo '{"event":"done","rank":0}'; printf 'no newline'`, &stdout, &stderr)
	require.NoError(t, RunProgram(ctxT(t, time.Minute), cfg))
	for r := range 2 {
		assert.Equal(t, []string{"out", `{"event":"done","rank":0}`, "no newline"}, stdout.of(r, "stdout"), "rank %d", r)
		assert.Equal(t, []string{"err"}, stderr.of(r, "stderr"), "rank %d", r)
	}
	assert.Len(t, stdout.lines, 6, "nothing else on stdout:\n%s", &stdout)
	assert.Len(t, stderr.lines, 2, "nothing else on stderr:\n%s", &stderr)
}

// TestProgramRankFails: a rank that fails ends the run: the others get
// SIGTERM, their process groups (their trap says so, as in
// TestProgramInterrupted), and the error names the rank and how it
// ended, with the status to exit with. Rank 1 fails once the others are
// ready, when the test opens the gate it waits at.
func TestProgramRankFails(t *testing.T) {
	for _, tc := range []struct {
		name, how string
		want      RankError
		msg       string
		code      int
	}{
		{"status 3", "exit 3", RankError{Rank: 1, Status: 3}, "rank 1 exited with status 3", 3},
		{"killed", "kill -KILL $$", RankError{Rank: 1, Status: -1, Signal: syscall.SIGKILL}, "rank 1 was killed by signal 9 (killed)", 137},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gate := filepath.Join(t.TempDir(), "gate")
			require.NoError(t, syscall.Mkfifo(gate, 0o600))
			script := `if [ "$SHOAL_RANK" = 1 ]; then read go < '` + gate + `'; ` + tc.how + `; fi
trap 'echo stopped; exit 0' TERM
sh -c 'echo ready; exec sleep 1000' # sh runs its trap once this is over: only a signal to the group ends it`
			var stdout, stderr lineLog
			stdout.see = whenAll(func() {
				// Rank 1 waits at the gate, or soon will: opening it
				// for writing waits for its reader.
				assert.NoError(t, os.WriteFile(gate, []byte("go\n"), 0o600))
			}, "[0]<stdout>:ready", "[2]<stdout>:ready")
			err := RunProgram(ctxT(t, time.Minute), programConfig(3, script, &stdout, &stderr))
			var re *RankError
			require.ErrorAs(t, err, &re, "stdout:\n%s\nstderr:\n%s", &stdout, &stderr)
			assert.Equal(t, tc.msg, re.Error())
			assert.Equal(t, tc.code, re.ExitCode())
			re.Err = nil
			assert.Equal(t, tc.want, *re)
			for _, r := range []int{0, 2} {
				assert.Equal(t, []string{"ready", "stopped"}, stdout.of(r, "stdout"), "rank %d was stopped with SIGTERM", r)
			}
			for _, line := range stderr.lines {
				// sh may say its sleep was Terminated.
				assert.Regexp(t, `^\[[02]\]<stderr>:`, line, "the failure is the error's to report, and the others were asked to stop")
			}
		})
	}
}

// TestProgramInterrupted: when the run's context ends (shoal run got
// SIGINT or SIGTERM), every rank gets SIGTERM, its whole process group,
// and the run's error says it was interrupted. Each rank's sh waits for
// its sleep before its trap runs, so SIGTERM to sh alone would leave the
// trap to the grace's SIGKILL.
func TestProgramInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(ctxT(t, time.Minute))
	defer cancel()
	var stdout, stderr lineLog
	stdout.see = whenAll(cancel, "[0]<stdout>:ready", "[1]<stdout>:ready")
	err := RunProgram(ctx, programConfig(2, `trap 'echo got TERM; exit 0' TERM; sh -c 'echo ready; exec sleep 1000'`, &stdout, &stderr))
	require.ErrorIs(t, err, context.Canceled)
	for r := range 2 {
		assert.Equal(t, []string{"ready", "got TERM"}, stdout.of(r, "stdout"), "rank %d", r)
	}
}

// TestProgramIgnoringSIGTERMIsKilled: a program that ignores SIGTERM,
// and what it started, are killed once the stop grace has passed, and
// not before.
func TestProgramIgnoringSIGTERMIsKilled(t *testing.T) {
	ctx, l, stderr := newTestLauncher(t)
	const grace = 200 * time.Millisecond
	l.SetStopGrace(grace)
	ready := make(chan struct{})
	stdout := &lineLog{see: whenAll(func() { close(ready) }, "[0]<stdout>:ready")}
	c, err := l.StartProgram(ctx, "rank 0", 0, nil, stdout, "sh", "-c", `trap '' TERM; sleep 1000 & echo $!; echo ready; wait`)
	require.NoError(t, err)
	select {
	case <-ready:
	case <-c.Exited():
		t.Fatalf("it exited before it was ready: %v; stderr:\n%s", c.Err(), stderr)
	}
	stopped := time.Now()
	c.Stop()
	<-c.Exited()
	assert.GreaterOrEqual(t, time.Since(stopped), grace, "killed before its grace was over")
	assert.EqualError(t, c.Err(), "signal: killed")
	assert.False(t, c.Died(), "its stop was asked for")
	out := stdout.of(0, "stdout")
	require.Len(t, out, 2)
	pid, err := strconv.Atoi(out[0])
	require.NoError(t, err)
	assert.True(t, ends(t, pid, 10*time.Second), "its sleep, pid %d, which ignores SIGTERM too, was killed with it", pid)
}

// ends says whether process pid ends (it may be a zombie) within d: a
// signal sent it may not have been delivered yet.
func ends(t *testing.T, pid int, d time.Duration) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return true // ended and reaped
	}
	require.NoError(t, err)
	defer unix.Close(fd)
	// A pidfd is readable once its process has ended.
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, int(d.Milliseconds()))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		require.NoError(t, err)
		return n == 1
	}
}

// TestProgramConfigValidates: a run that cannot start is refused before
// anything starts, saying what is wrong.
func TestProgramConfigValidates(t *testing.T) {
	var out lineLog
	for _, tc := range []struct {
		name string
		cfg  ProgramConfig
		want string
	}{
		{"no program", DefaultProgramConfig(nil, 2, &out, &out), "no program to run"},
		{"no rank", DefaultProgramConfig([]string{"true"}, 0, &out, &out), "-np 0: want >= 1"},
		{"servers in a ring", func() ProgramConfig {
			c := DefaultProgramConfig([]string{"true"}, 1, &out, &out)
			c.Servers = 2
			return c
		}(), "2 servers: --mode ring has none"},
		{"no server in a PS mode", func() ProgramConfig {
			c := DefaultProgramConfig([]string{"true"}, 1, &out, &out)
			c.Mode = consistency.Async
			return c
		}(), "--servers 0: --mode async needs >= 1"},
		{"local steps in a ring", func() ProgramConfig {
			c := DefaultProgramConfig([]string{"true"}, 1, &out, &out)
			c.LocalSteps = 4
			return c
		}(), "4 local steps: want 0, or > 0 in a parameter-server mode"},
		{"compression in a ring", func() ProgramConfig {
			c := DefaultProgramConfig([]string{"true"}, 1, &out, &out)
			c.Compression = "fp16"
			return c
		}(), "compression fp16: for the pushes of a parameter-server mode"},
		{"a PS mode without the servers' argv", func() ProgramConfig {
			c := DefaultProgramConfig([]string{"true"}, 1, &out, &out)
			c.Mode, c.Servers = consistency.SSP, 1
			return c
		}(), "the servers need their binary and their argv"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.ErrorContains(t, RunProgram(context.Background(), tc.cfg), tc.want)
		})
	}
	assert.Empty(t, out.lines)
}

// TestPrefixWriter: whole lines, one Write each; a line too long to hold
// is passed on in pieces; Flush passes on the unfinished last one.
func TestPrefixWriter(t *testing.T) {
	var out lineLog
	p := &prefixWriter{w: &out, prefix: "[3]<stdout>:"}
	p.Write([]byte("a\nb"))
	p.Write([]byte("c\n\nd"))
	assert.Equal(t, []string{"[3]<stdout>:a", "[3]<stdout>:bc", "[3]<stdout>:"}, out.lines)
	p.Flush()
	p.Flush()
	assert.Equal(t, "[3]<stdout>:d", out.lines[len(out.lines)-1], "flushed once")
	out.lines = nil
	p.Write([]byte(strings.Repeat("x", maxLine+5)))
	p.Flush()
	require.Len(t, out.lines, 2)
	assert.Equal(t, []int{len("[3]<stdout>:") + maxLine, len("[3]<stdout>:") + 5}, []int{len(out.lines[0]), len(out.lines[1])})
	assert.Regexp(t, regexp.MustCompile(`^\[3\]<stdout>:x+$`), out.lines[0])
}
