package launch

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/shoalml/shoal/internal/lockedio"
)

// The fake children are this test binary, started again with fakeEnv set
// to what the child should do; TestMain runs that instead of the tests.
const fakeEnv = "SHOAL_LAUNCH_FAKE_CHILD"

func TestMain(m *testing.M) {
	if what := os.Getenv(fakeEnv); what != "" {
		os.Exit(fakeChild(what))
	}
	goleak.VerifyTestMain(m)
}

// fakeChild plays a child of the launcher:
//   - listen: logs to stderr, reports a listening event, then serves until
//     told "stop" on stdin (exit 0) or stdin ends;
//   - silent: serves without ever reporting an event;
//   - shard: as listen, on port 7070 + its --shard=N argument;
//   - worker: reports an epoch's progress and its done event as rank 0,
//     and exits 0;
//   - worker-told: reports the epoch's progress, then its done event once
//     told "finish" on stdin, and exits 0 (at the end of stdin, without
//     the done event);
//   - die: says its last words on stderr and exits with status 3;
//   - chatty: prints a line that is not an event, an event, and exits 0;
//   - hang: neither reads nor writes until a signal ends it;
//   - json: prints plain lines and two JSON objects, and exits 0.
func fakeChild(what string) int {
	serve := func() int {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			if sc.Text() == "stop" {
				return 0
			}
		}
		return 0
	}
	switch what {
	case "listen":
		fmt.Fprintln(os.Stderr, "level=INFO msg=serving")
		Emit(os.Stdout, Event{Event: Listening, Addr: "127.0.0.1:7070"})
		return serve()
	case "silent":
		return serve()
	case "shard":
		// A shard of RunProgram's: shard i listens on port 7070+i.
		i := 0
		for _, a := range os.Args[1:] {
			if v, ok := strings.CutPrefix(a, "--shard="); ok {
				i, _ = strconv.Atoi(v)
			}
		}
		Emit(os.Stdout, Event{Event: Listening, Addr: fmt.Sprintf("127.0.0.1:%d", 7070+i)})
		return serve()
	case "worker":
		// Rank 0 of a job: an epoch, then its done event.
		Emit(os.Stdout, Event{Event: Progress, Rank: 0, Epoch: 0, Epochs: 1, Step: 10, EpochSteps: 10, Samples: 40, Correct: 20, LossSum: 40, Seconds: 1, EpochDone: true})
		Emit(os.Stdout, Event{Event: Done, Rank: 0, Steps: 10, Samples: 40, Seconds: 1})
		return 0
	case "worker-told":
		Emit(os.Stdout, Event{Event: Progress, Rank: 0, Epoch: 0, Epochs: 1, Step: 10, EpochSteps: 10, Samples: 40, Correct: 20, LossSum: 40, Seconds: 1, EpochDone: true})
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			if sc.Text() == "finish" {
				Emit(os.Stdout, Event{Event: Done, Rank: 0, Steps: 10, Samples: 40, Seconds: 1})
				return 0
			}
		}
		return 0
	case "die":
		fmt.Fprintln(os.Stderr, "panic: out of luck")
		return 3
	case "chatty":
		fmt.Println("not an event")
		Emit(os.Stdout, Event{Event: Progress, Rank: 1, Step: 7})
		return 0
	case "hang":
		// Until a signal ends it (Stop sends SIGTERM; a timeout SIGKILL).
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM)
		<-sig
		return 1
	case "json":
		fmt.Println("starting")
		fmt.Println(`{"first": 1}`)
		fmt.Println(`{"last": 2}`)
		fmt.Println("bye")
		return 0
	}
	fmt.Fprintln(os.Stderr, "unknown fake child", what)
	return 2
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// startFake starts a fake child doing what.
func startFake(ctx context.Context, t *testing.T, l *Launcher, name string, rank int, what string) *Child {
	t.Helper()
	c, err := l.Start(ctx, name, rank, []string{fakeEnv + "=" + what})
	require.NoError(t, err)
	return c
}

// newTestLauncher returns a launcher of this test binary whose children's
// stderr is the returned buffer, shut down when the test ends, and the
// test's context.
func newTestLauncher(t *testing.T) (context.Context, *Launcher, *lockedio.Buffer) {
	exe, err := os.Executable()
	require.NoError(t, err)
	stderr := lockedio.NewBuffer()
	l := New(exe, stderr)
	t.Cleanup(l.Shutdown)
	return ctxT(t, time.Minute), l, stderr
}

func isListening(e Event) bool { return e.Event == Listening }

// TestLauncherReportsADeathWhileAnotherStarts kills child a while the
// launcher waits for child b to report its address. b never does: only
// a's death can end the wait, and the wait must end with it, by name and
// with its last words, rather than pass it over. Its exit stays for the
// next reader, and Shutdown, which stops b, reports neither again.
func TestLauncherReportsADeathWhileAnotherStarts(t *testing.T) {
	ctx, l, stderr := newTestLauncher(t)

	a := startFake(ctx, t, l, "ps 0", 0, "listen")
	ev, err := l.WaitFor(ctx, a, time.Minute, isListening)
	require.NoError(t, err, "stderr:\n%s", stderr)
	assert.Equal(t, "127.0.0.1:7070", ev.Addr)

	b := startFake(ctx, t, l, "ps 1", 1, "silent")
	require.NoError(t, a.cmd.Process.Kill())
	// The timeout only bounds a launcher that passes the death over.
	_, err = l.WaitFor(ctx, b, time.Minute, isListening)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "while ps 1 was starting, ps 0 exited: signal: killed")
	assert.Contains(t, err.Error(), "its last words: level=INFO msg=serving", "a's last words are its log on stderr")

	l.Shutdown()
	assert.NotRegexp(t, `(?m)^ps \d exited`, stderr.String(), "reported by WaitFor, or stopped")
	for _, want := range []*Child{a, b} {
		m, err := l.Next(ctx)
		require.NoError(t, err)
		assert.Same(t, want, m.From)
		assert.True(t, m.Exit, "%s's exit is still there for the next reader", want.Name())
	}
}

// TestLauncherReportsADeathNobodyRead: a child dies after start-up while
// nobody reads the launcher's messages; Shutdown reports it.
func TestLauncherReportsADeathNobodyRead(t *testing.T) {
	ctx, l, stderr := newTestLauncher(t)

	c := startFake(ctx, t, l, "worker 0", 0, "die")
	<-c.Exited()
	l.Shutdown()
	assert.Equal(t, "[worker 0] panic: out of luck\nworker 0 exited: exit status 3\n  its last words: panic: out of luck\n", stderr.String())
	assert.True(t, c.Died())
}

// TestLauncherChildren: a child's events arrive in order with its name;
// a line that is not an event goes to stderr under its name; Tell("stop")
// ends a child cleanly (no death to report); Stop ends one that was asked
// to (no death either).
func TestLauncherChildren(t *testing.T) {
	ctx, l, stderr := newTestLauncher(t)

	chatty := startFake(ctx, t, l, "worker 1", 1, "chatty")
	m, err := l.Next(ctx)
	require.NoError(t, err)
	assert.Same(t, chatty, m.From)
	assert.Equal(t, Event{Event: Progress, Rank: 1, Step: 7}, m.Event)
	m, err = l.Next(ctx)
	require.NoError(t, err)
	assert.True(t, m.Exit)
	assert.NoError(t, chatty.Err())
	assert.Equal(t, 1, chatty.Rank())
	assert.Contains(t, stderr.String(), "[worker 1] not an event\n")

	told := startFake(ctx, t, l, "ps 0", 0, "listen")
	_, err = l.WaitFor(ctx, told, time.Minute, isListening)
	require.NoError(t, err)
	told.Tell("stop")
	m, err = l.Next(ctx)
	require.NoError(t, err)
	require.True(t, m.Exit)
	assert.NoError(t, told.Err(), "told to stop, it exits with status 0")
	told.Tell("stop") // an exited child is not told, and nothing breaks

	stopped := startFake(ctx, t, l, "ps 1", 1, "silent")
	stopped.Stop()
	<-stopped.Exited()
	assert.Error(t, stopped.Err(), "SIGTERM")
	assert.False(t, stopped.Died(), "its exit was asked for")
	l.Shutdown()
	assert.NotContains(t, stderr.String(), "exited")
}

// TestLauncherStartFails: a binary that cannot start is an error naming
// the child.
func TestLauncherStartFails(t *testing.T) {
	stderr := lockedio.NewBuffer()
	l := New("/nonexistent/shoal", stderr)
	defer l.Shutdown()
	_, err := l.Start(ctxT(t, time.Minute), "ps 0", 0, nil)
	assert.ErrorContains(t, err, "starting ps 0")
}

// TestWaitForTimesOut: a child that never reports is given up on after
// the timeout, by name.
func TestWaitForTimesOut(t *testing.T) {
	ctx, l, _ := newTestLauncher(t)
	c := startFake(ctx, t, l, "ps 0", 0, "silent")
	_, err := l.WaitFor(ctx, c, time.Millisecond, isListening)
	assert.EqualError(t, err, "ps 0 did not start within 1ms")
}

func TestRunJSON(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)
	ctx := ctxT(t, time.Minute)
	t.Setenv(fakeEnv, "json")
	line, err := RunJSON(ctx, time.Minute, exe, nil, nil, os.Stderr)
	require.NoError(t, err)
	assert.Equal(t, `{"last": 2}`, string(line), "the last JSON object")

	t.Setenv(fakeEnv, "die")
	_, err = RunJSON(ctx, time.Minute, exe, []string{"train"}, nil, os.Stderr)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "exit status 3: panic: out of luck", "the end of its stderr")

	t.Setenv(fakeEnv, "chatty")
	line, err = RunJSON(ctx, time.Minute, exe, nil, nil, os.Stderr)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(line), `{"event":"progress"`))

	t.Setenv(fakeEnv, "hang")
	_, err = RunJSON(ctx, 10*time.Millisecond, exe, nil, nil, os.Stderr)
	assert.ErrorContains(t, err, "did not finish within 10ms")
}

// TestLauncherMailbox drives the mailbox with children that are only
// names: what waitFor returns, and what it leaves, in order, for next.
// The messages are posted while waitFor runs; the outcome does not depend
// on how the two interleave.
func TestLauncherMailbox(t *testing.T) {
	kid := func(name string, err error, words string) *Child {
		c := &Child{name: name, err: err, tail: &tailBuffer{max: 256}}
		c.tail.Write([]byte(words))
		return c
	}
	a := kid("ps 0", errors.New("exit status 1"), "shoal: --listen 127.0.0.1:7070: address already in use\n")
	b := kid("ps 1", errors.New("signal: killed"), "")
	ev := func(c *Child, name string, step int) Message {
		return Message{From: c, Event: Event{Event: name, Step: step}}
	}
	exit := func(c *Child) Message { return Message{From: c, Exit: true} }

	for _, tc := range []struct {
		name    string
		posts   []Message
		wantErr string // "" for b's listening event
		left    []Message
	}{
		{
			name:  "others' events wait their turn",
			posts: []Message{ev(a, "progress", 1), ev(b, "progress", 1), ev(b, "listening", 0), ev(a, "progress", 2)},
			left:  []Message{ev(a, "progress", 1), ev(b, "progress", 1), ev(a, "progress", 2)},
		},
		{
			name:  "an exit after the awaited event is left for next",
			posts: []Message{ev(b, "listening", 0), exit(a)},
			left:  []Message{exit(a)},
		},
		{
			name:    "another child's exit ends the wait, naming it",
			posts:   []Message{ev(a, "progress", 1), exit(a), ev(b, "listening", 0)},
			wantErr: "while ps 1 was starting, ps 0 exited: exit status 1\n  its last words: shoal: --listen 127.0.0.1:7070: address already in use",
			left:    []Message{ev(a, "progress", 1), exit(a), ev(b, "listening", 0)},
		},
		{
			name:    "the awaited child's exit",
			posts:   []Message{exit(b)},
			wantErr: "ps 1 exited: signal: killed",
			left:    []Message{exit(b)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxT(t, time.Minute)
			l := &Launcher{arrived: make(chan struct{})}
			posted := make(chan struct{})
			go func() {
				defer close(posted)
				for _, m := range tc.posts {
					l.post(m)
				}
			}()
			got, err := l.WaitFor(ctx, b, time.Minute, isListening)
			<-posted
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Equal(t, tc.wantErr, err.Error())
			} else {
				require.NoError(t, err)
				assert.Equal(t, "listening", got.Event)
			}
			for i, want := range tc.left {
				m, err := l.Next(ctx)
				require.NoError(t, err, "message %d", i)
				assert.Equal(t, want, m, "message %d", i)
			}
			assert.Empty(t, l.box, "messages beyond those expected")
		})
	}
}

// TestLauncherShutdownReportsDeaths: shutdown reports the deaths nobody
// took from the mailbox, once, and no exit that was asked for or clean.
func TestLauncherShutdownReportsDeaths(t *testing.T) {
	kid := func(name string, err error, asked bool) *Child {
		c := &Child{name: name, err: err, asked: asked, tail: &tailBuffer{max: 256}}
		c.tail.Write([]byte("panic: " + name + "\n"))
		return c
	}
	untaken := kid("ps 0", errors.New("exit status 2"), false)
	taken := kid("ps 1", errors.New("exit status 2"), false)
	waited := kid("ps 2", errors.New("exit status 2"), false)
	stopped := kid("worker 0", errors.New("signal: terminated"), true)
	finished := kid("worker 1", nil, false)

	stderr := lockedio.NewBuffer()
	l := &Launcher{stderr: &lockedio.Writer{W: stderr}, arrived: make(chan struct{})}
	l.post(Message{From: taken, Exit: true})
	_, err := l.Next(context.Background())
	require.NoError(t, err)
	for _, c := range []*Child{waited, untaken, stopped, finished} {
		l.post(Message{From: c, Exit: true})
	}
	_, err = l.WaitFor(context.Background(), finished, time.Minute, isListening)
	require.ErrorContains(t, err, "ps 2 exited")

	l.Shutdown()
	l.Shutdown()
	assert.Equal(t, "ps 0 exited: exit status 2\n  its last words: panic: ps 0\n", stderr.String())
}

// TestLauncherNextEndsWithItsContext: next waits for a message only as
// long as its context.
func TestLauncherNextEndsWithItsContext(t *testing.T) {
	l := &Launcher{arrived: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := l.Next(ctx)
	assert.ErrorIs(t, err, context.Canceled)
}
