package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// launcher runs child processes of this binary and turns their stdout
// JSON events and their exits into messages on one channel.
type launcher struct {
	exe    string
	stderr *lockedWriter
	msgs   chan message
	wg     sync.WaitGroup
	kids   []*child
}

// child is one process.
type child struct {
	name   string
	rank   int
	cmd    *exec.Cmd
	cancel context.CancelFunc
	tail   *tailBuffer
	stdin  io.WriteCloser // the child's control channel (see readControl)
	exited chan struct{}
	err    error // set before exited is closed
}

// message is an event from a child, or its exit (exit set).
type message struct {
	from *child
	ev   event
	exit bool
}

func newLauncher(stderr io.Writer) (*launcher, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding this binary to start children: %w", err)
	}
	return &launcher{exe: exe, stderr: &lockedWriter{w: stderr}, msgs: make(chan message, 64)}, nil
}

// start runs `shoal args...` as a child named name.
func (l *launcher) start(ctx context.Context, name string, rank int, args ...string) (*child, error) {
	return l.startEnv(ctx, name, rank, nil, args...)
}

// startEnv is start with extra environment variables.
func (l *launcher) startEnv(ctx context.Context, name string, rank int, env []string, args ...string) (*child, error) {
	cctx, cancel := context.WithCancel(ctx)
	cmd := exec.CommandContext(cctx, l.exe, args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.SysProcAttr = childAttr()
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	c := &child{name: name, rank: rank, cmd: cmd, cancel: cancel, tail: &tailBuffer{max: 4096}, exited: make(chan struct{})}
	cmd.Stderr = io.MultiWriter(&prefixWriter{w: l.stderr, prefix: "[" + name + "] "}, c.tail)
	out, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		return nil, err
	}
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		cancel()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	l.kids = append(l.kids, c)
	l.wg.Go(func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 64<<20) // --stats done events carry every step's times
		for sc.Scan() {
			var ev event
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil || ev.Event == "" {
				fmt.Fprintf(l.stderr, "[%s] %s\n", name, sc.Bytes())
				continue
			}
			l.msgs <- message{from: c, ev: ev}
		}
		io.Copy(io.Discard, out)
		c.err = cmd.Wait()
		cancel()
		close(c.exited)
		l.msgs <- message{from: c, exit: true}
	})
	return c, nil
}

// failure describes how a child ended, with the end of its stderr.
func (c *child) failure() string {
	msg := fmt.Sprintf("%s exited: %v", c.name, c.err)
	if t := bytes.TrimSpace(c.tail.Bytes()); len(t) > 0 {
		msg += "\n  its last words: " + string(bytes.ReplaceAll(t, []byte("\n"), []byte("\n  ")))
	}
	return msg
}

// tell sends c a control line; a child that has exited is not told.
func (c *child) tell(line string) {
	select {
	case <-c.exited:
	default:
		fmt.Fprintln(c.stdin, line) // an error means it is exiting: nothing to tell
	}
}

// stop asks c to exit (SIGTERM, SIGKILL after 10s) without waiting.
func (c *child) stop() { c.cancel() }

// shutdown stops every child and waits for all of them, draining messages
// so no goroutine is left blocked.
func (l *launcher) shutdown() {
	for _, c := range l.kids {
		c.stop()
	}
	done := make(chan struct{})
	go func() { l.wg.Wait(); close(done) }()
	for {
		select {
		case <-l.msgs:
		case <-done:
			return
		}
	}
}

// waitFor reads messages until one from c satisfies ok, c exits, ctx ends
// or the timeout passes. Messages from other children are handed to other.
func (l *launcher) waitFor(ctx context.Context, c *child, timeout time.Duration, ok func(event) bool) (event, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case m := <-l.msgs:
			if m.from != c {
				continue
			}
			if m.exit {
				return event{}, fmt.Errorf("%s", c.failure())
			}
			if ok(m.ev) {
				return m.ev, nil
			}
		case <-t.C:
			return event{}, fmt.Errorf("%s did not start within %v", c.name, timeout)
		case <-ctx.Done():
			return event{}, ctx.Err()
		}
	}
}

// lockedWriter serialises writes from several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// prefixWriter writes whole lines, each with a prefix.
type prefixWriter struct {
	w      io.Writer
	prefix string
	buf    []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.buf = append(p.buf, b...)
	for {
		i := bytes.IndexByte(p.buf, '\n')
		if i < 0 {
			break
		}
		fmt.Fprintf(p.w, "%s%s\n", p.prefix, p.buf[:i])
		p.buf = p.buf[i+1:]
	}
	return len(b), nil
}

// tailBuffer keeps the last max bytes written.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if len(t.buf) > t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
	return len(b), nil
}

func (t *tailBuffer) Bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]byte(nil), t.buf...)
}
