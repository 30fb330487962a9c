package launch

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/shoalml/shoal/internal/lockedio"
)

// Launcher runs child processes of a binary and turns their stdout
// JSON events and their exits into messages. Messages wait in a mailbox,
// in the order they arrived, until they are taken: Next takes the oldest,
// WaitFor the one it waits for, leaving the others where they are. So no
// message is lost to whoever reads after a wait, and a child never blocks
// on its stdout because nobody is reading at the moment.
//
// Every death of a child (an exit with an error that nobody asked for) is
// reported once: by whoever takes its exit from Next, by WaitFor's error,
// or else by Shutdown on stderr.
//
// Start, WaitFor, Next and Shutdown are called by one goroutine, the
// launcher's owner; the goroutines that read the children only post.
type Launcher struct {
	exe    string
	stderr *lockedio.Writer
	wg     sync.WaitGroup
	kids   []*Child

	mu      sync.Mutex
	box     []Message     // arrived and not yet taken, oldest first
	arrived chan struct{} // closed, and replaced, when a message is posted
}

// Child is one process started by a Launcher.
type Child struct {
	name   string
	rank   int
	cmd    *exec.Cmd
	cancel context.CancelFunc
	tail   *tailBuffer
	stdin  io.WriteCloser // the child's control channel (see Tell)
	exited chan struct{}
	err    error // set before exited is closed
	asked  bool  // its exit was asked for (stop, or the context ended); set with err
	// reported: its exit was handed to the launcher's owner; owned by it.
	reported bool
}

// Name is the name the child was started with.
func (c *Child) Name() string { return c.name }

// Rank is the rank the child was started with.
func (c *Child) Rank() int { return c.rank }

// Err is how the child exited (nil: status 0). Read it only once its exit
// was taken from the mailbox, or Exited is closed.
func (c *Child) Err() error { return c.err }

// Exited is closed once the child has exited and Err is set.
func (c *Child) Exited() <-chan struct{} { return c.exited }

// Message is an event from a child, or its exit (Exit set).
type Message struct {
	From  *Child
	Event Event
	Exit  bool
}

// New returns a launcher of exe (usually this binary, os.Executable)
// whose children's stderr goes to stderr, each line prefixed with the
// child's name.
func New(exe string, stderr io.Writer) *Launcher {
	return &Launcher{exe: exe, stderr: &lockedio.Writer{W: stderr}, arrived: make(chan struct{})}
}

// Start runs the launcher's binary with args as a child named name, with
// env added to this process's environment. The child's stdout is read as
// JSON events (a line that is not one goes to stderr with the child's
// name), its stderr goes to the launcher's with the name as prefix, and
// its stdin is its control channel (Tell). The child is stopped when ctx
// ends.
func (l *Launcher) Start(ctx context.Context, name string, rank int, env []string, args ...string) (*Child, error) {
	cctx, cancel := context.WithCancel(ctx)
	cmd := exec.CommandContext(cctx, l.exe, args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.SysProcAttr = childAttr()
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	c := &Child{name: name, rank: rank, cmd: cmd, cancel: cancel, tail: &tailBuffer{max: 4096}, exited: make(chan struct{})}
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
			var ev Event
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil || ev.Event == "" {
				fmt.Fprintf(l.stderr, "[%s] %s\n", name, sc.Bytes())
				continue
			}
			l.post(Message{From: c, Event: ev})
		}
		io.Copy(io.Discard, out)
		c.err = cmd.Wait()
		c.asked = cctx.Err() != nil
		cancel()
		close(c.exited)
		l.post(Message{From: c, Exit: true})
	})
	return c, nil
}

// Signal is the signal that ended the child, when a signal it was not
// asked to stop by did (SIGKILL from outside, the OOM killer), else "".
func (c *Child) Signal() string {
	var ee *exec.ExitError
	if c.asked || !errors.As(c.err, &ee) {
		return ""
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return ws.Signal().String()
	}
	return ""
}

// Failure describes how a child ended, with the end of its stderr.
func (c *Child) Failure() string {
	msg := fmt.Sprintf("%s exited: %v", c.name, c.err)
	if c.err == nil {
		msg = c.name + " exited with status 0"
	}
	if t := bytes.TrimSpace(c.tail.Bytes()); len(t) > 0 {
		msg += "\n  its last words: " + string(bytes.ReplaceAll(t, []byte("\n"), []byte("\n  ")))
	}
	return msg
}

// Tell sends c a control line; a child that has exited is not told.
func (c *Child) Tell(line string) {
	select {
	case <-c.exited:
	default:
		fmt.Fprintln(c.stdin, line) // an error means it is exiting: nothing to tell
	}
}

// Kill ends the child at once with SIGKILL, as if from outside: its exit
// is a death (Signal says "killed"), not one that was asked for.
func (c *Child) Kill() error { return c.cmd.Process.Kill() }

// Stop asks c to exit (SIGTERM, SIGKILL after 10s) without waiting.
func (c *Child) Stop() { c.cancel() }

// Died reports whether c ended on its own with an error.
func (c *Child) Died() bool { return c.err != nil && !c.asked }

// Shutdown stops every child and waits for all of them and for the
// goroutines that read them. The deaths among the exits nobody took are
// reported on stderr; the messages stay in the mailbox.
func (l *Launcher) Shutdown() {
	for _, c := range l.kids {
		c.Stop()
	}
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.box {
		if m.Exit && m.From.Died() && !m.From.reported {
			m.From.reported = true
			fmt.Fprintln(l.stderr, m.From.Failure())
		}
	}
}

// post puts m at the end of the mailbox; it never blocks.
func (l *Launcher) post(m Message) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.box = append(l.box, m)
	close(l.arrived)
	l.arrived = make(chan struct{})
}

// Next takes the oldest message in the mailbox, waiting for one until ctx
// ends.
func (l *Launcher) Next(ctx context.Context) (Message, error) {
	for {
		l.mu.Lock()
		if len(l.box) > 0 {
			m := l.box[0]
			l.box[0] = Message{}
			l.box = l.box[1:]
			l.mu.Unlock()
			if m.Exit {
				m.From.reported = true // the caller's to report
			}
			return m, nil
		}
		arrived := l.arrived
		l.mu.Unlock()
		select {
		case <-arrived:
		case <-ctx.Done():
			return Message{}, ctx.Err()
		}
	}
}

// WaitFor waits until c sends an event that satisfies ok and takes it from
// the mailbox. It is meant for start-up, when every child started so far
// must be running: the exit of any child, c or another, that arrived before
// that event ends the wait with the child's failure, naming it. It also
// ends when ctx ends or the timeout passes. Every other message, the exit
// included, stays in the mailbox in order for Next.
func (l *Launcher) WaitFor(ctx context.Context, c *Child, timeout time.Duration, ok func(Event) bool) (Event, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		if err := ctx.Err(); err != nil {
			return Event{}, err // the children are being stopped: their exits say nothing more
		}
		l.mu.Lock()
		ev, dead, found := l.scan(c, ok)
		arrived := l.arrived
		l.mu.Unlock()
		if dead != nil {
			dead.reported = true
		}
		switch {
		case found:
			return ev, nil
		case dead == c:
			return Event{}, errors.New(c.Failure())
		case dead != nil:
			return Event{}, fmt.Errorf("while %s was starting, %s", c.name, dead.Failure())
		}
		select {
		case <-arrived:
		case <-t.C:
			return Event{}, fmt.Errorf("%s did not start within %v", c.name, timeout)
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// scan looks through the mailbox, oldest first, for c's event that
// satisfies ok, and takes it; it stops at the first exit of any child and
// returns that child instead. l.mu is held.
func (l *Launcher) scan(c *Child, ok func(Event) bool) (ev Event, dead *Child, found bool) {
	for i, m := range l.box {
		switch {
		case m.Exit:
			return Event{}, m.From, false
		case m.From == c && ok(m.Event):
			l.box = slices.Delete(l.box, i, i+1)
			return m.Event, nil, true
		}
	}
	return Event{}, nil, false
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
