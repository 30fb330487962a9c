package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func isListening(e event) bool { return e.Event == "listening" }

// TestLauncherReportsADeathWhileAnotherStarts kills parameter-server shard
// 0 while the launcher waits for shard 1 to report its address. Shard 1
// runs without --events, so it never does: only shard 0's death can end
// the wait, and the wait must end with it, by name and with its last
// words, rather than pass it over. Its exit stays for the next reader, and
// shutdown, which stops shard 1, reports neither again.
func TestLauncherReportsADeathWhileAnotherStarts(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx := ctxT(t, 2*time.Minute)
	var stderr syncBuffer
	l, err := newLauncher(&stderr)
	require.NoError(t, err)
	l.exe = shoalBin
	defer l.shutdown()

	ps0, err := l.start(ctx, "ps 0", 0, "ps", "--listen", "127.0.0.1:0", "--events", "--hidden", "8", "--shard", "0", "--servers", "2")
	require.NoError(t, err)
	_, err = l.waitFor(ctx, ps0, time.Minute, isListening)
	require.NoError(t, err, "stderr:\n%s", &stderr)

	ps1, err := l.start(ctx, "ps 1", 1, "ps", "--listen", "127.0.0.1:0", "--hidden", "8", "--shard", "1", "--servers", "2")
	require.NoError(t, err)
	require.NoError(t, ps0.cmd.Process.Kill())
	// The timeout only bounds a launcher that passes the death over.
	_, err = l.waitFor(ctx, ps1, time.Minute, isListening)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "while ps 1 was starting, ps 0 exited: signal: killed")
	assert.Contains(t, err.Error(), "its last words:")
	assert.Contains(t, err.Error(), "msg=serving", "ps 0's last words are its log on stderr")

	l.shutdown()
	assert.NotRegexp(t, `(?m)^ps \d exited`, stderr.String(), "reported by waitFor, or stopped")
	for _, want := range []*child{ps0, ps1} {
		m, err := l.next(ctx)
		require.NoError(t, err)
		assert.Same(t, want, m.from)
		assert.True(t, m.exit, "%s's exit is still there for the next reader", want.name)
	}
}

// TestLauncherReportsADeathNobodyRead kills a shard after start-up, when
// nobody reads the launcher's messages: shutdown reports it.
func TestLauncherReportsADeathNobodyRead(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx := ctxT(t, 2*time.Minute)
	var stderr syncBuffer
	l, err := newLauncher(&stderr)
	require.NoError(t, err)
	l.exe = shoalBin
	defer l.shutdown()

	ps0, err := l.start(ctx, "ps 0", 0, "ps", "--listen", "127.0.0.1:0", "--events", "--hidden", "8")
	require.NoError(t, err)
	_, err = l.waitFor(ctx, ps0, time.Minute, isListening)
	require.NoError(t, err, "stderr:\n%s", &stderr)
	require.NoError(t, ps0.cmd.Process.Kill())
	<-ps0.exited

	l.shutdown()
	assert.Regexp(t, `(?m)^ps 0 exited: signal: killed\n  its last words: .*msg=serving`, stderr.String())
}

// TestLauncherMailbox drives the mailbox with children that are only
// names: what waitFor returns, and what it leaves, in order, for next.
// The messages are posted while waitFor runs; the outcome does not depend
// on how the two interleave.
func TestLauncherMailbox(t *testing.T) {
	kid := func(name string, err error, words string) *child {
		c := &child{name: name, err: err, tail: &tailBuffer{max: 256}}
		c.tail.Write([]byte(words))
		return c
	}
	a := kid("ps 0", errors.New("exit status 1"), "shoal: --listen 127.0.0.1:7070: address already in use\n")
	b := kid("ps 1", errors.New("signal: killed"), "")
	ev := func(c *child, name string, step int) message {
		return message{from: c, ev: event{Event: name, Step: step}}
	}
	exit := func(c *child) message { return message{from: c, exit: true} }

	for _, tc := range []struct {
		name    string
		posts   []message
		wantErr string // "" for b's listening event
		left    []message
	}{
		{
			name:  "others' events wait their turn",
			posts: []message{ev(a, "progress", 1), ev(b, "progress", 1), ev(b, "listening", 0), ev(a, "progress", 2)},
			left:  []message{ev(a, "progress", 1), ev(b, "progress", 1), ev(a, "progress", 2)},
		},
		{
			name:  "an exit after the awaited event is left for next",
			posts: []message{ev(b, "listening", 0), exit(a)},
			left:  []message{exit(a)},
		},
		{
			name:    "another child's exit ends the wait, naming it",
			posts:   []message{ev(a, "progress", 1), exit(a), ev(b, "listening", 0)},
			wantErr: "while ps 1 was starting, ps 0 exited: exit status 1\n  its last words: shoal: --listen 127.0.0.1:7070: address already in use",
			left:    []message{ev(a, "progress", 1), exit(a), ev(b, "listening", 0)},
		},
		{
			name:    "the awaited child's exit",
			posts:   []message{exit(b)},
			wantErr: "ps 1 exited: signal: killed",
			left:    []message{exit(b)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxT(t, time.Minute)
			l := &launcher{arrived: make(chan struct{})}
			posted := make(chan struct{})
			go func() {
				defer close(posted)
				for _, m := range tc.posts {
					l.post(m)
				}
			}()
			got, err := l.waitFor(ctx, b, time.Minute, isListening)
			<-posted
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Equal(t, tc.wantErr, err.Error())
			} else {
				require.NoError(t, err)
				assert.Equal(t, "listening", got.Event)
			}
			for i, want := range tc.left {
				m, err := l.next(ctx)
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
	kid := func(name string, err error, asked bool) *child {
		c := &child{name: name, err: err, asked: asked, tail: &tailBuffer{max: 256}}
		c.tail.Write([]byte("panic: " + name + "\n"))
		return c
	}
	untaken := kid("ps 0", errors.New("exit status 2"), false)
	taken := kid("ps 1", errors.New("exit status 2"), false)
	waited := kid("ps 2", errors.New("exit status 2"), false)
	stopped := kid("worker 0", errors.New("signal: terminated"), true)
	finished := kid("worker 1", nil, false)

	var stderr syncBuffer
	l := &launcher{stderr: &lockedWriter{w: &stderr}, arrived: make(chan struct{})}
	l.post(message{from: taken, exit: true})
	_, err := l.next(context.Background())
	require.NoError(t, err)
	for _, c := range []*child{waited, untaken, stopped, finished} {
		l.post(message{from: c, exit: true})
	}
	_, err = l.waitFor(context.Background(), finished, time.Minute, isListening)
	require.ErrorContains(t, err, "ps 2 exited")

	l.shutdown()
	l.shutdown()
	assert.Equal(t, "ps 0 exited: exit status 2\n  its last words: panic: ps 0\n", stderr.String())
}

// TestLauncherNextEndsWithItsContext: next waits for a message only as
// long as its context.
func TestLauncherNextEndsWithItsContext(t *testing.T) {
	l := &launcher{arrived: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := l.next(ctx)
	assert.ErrorIs(t, err, context.Canceled)
}
