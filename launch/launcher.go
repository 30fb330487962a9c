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
	grace  time.Duration // from a stop's SIGTERM to its SIGKILL
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
	stdin  io.WriteCloser // the child's control channel (see Tell); nil for a program
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
	return &Launcher{exe: exe, stderr: &lockedio.Writer{W: stderr}, grace: DefaultStopGrace, arrived: make(chan struct{})}
}

// DefaultStopGrace is how long a child asked to stop has to exit after
// its SIGTERM before SIGKILL ends it.
const DefaultStopGrace = 10 * time.Second

// SetStopGrace sets how long a child asked to stop (Stop, the end of its
// context, Shutdown) has to exit after its SIGTERM before SIGKILL ends
// it, for the children started after the call; d <= 0 changes nothing.
func (l *Launcher) SetStopGrace(d time.Duration) {
	if d > 0 {
		l.grace = d
	}
}

// Start runs the launcher's binary with args as a child named name, with
// env added to this process's environment. The child's stdout is read as
// JSON events (a line that is not one goes to stderr with the child's
// name), its stderr goes to the launcher's with the name as prefix, and
// its stdin is its control channel (Tell). The child is stopped when ctx
// ends.
func (l *Launcher) Start(ctx context.Context, name string, rank int, env []string, args ...string) (*Child, error) {
	cctx, c := l.command(ctx, name, rank, env, append([]string{l.exe}, args...))
	cmd := c.cmd
	cmd.SysProcAttr = childAttr()
	cmd.Stderr = io.MultiWriter(&prefixWriter{w: l.stderr, prefix: "[" + name + "] "}, c.tail)
	out, err := cmd.StdoutPipe()
	if err != nil {
		c.cancel()
		return nil, err
	}
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		c.cancel()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		c.cancel()
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
		l.exited(cctx, c, cmd.Wait())
	})
	return c, nil
}

// StartProgram runs argv (argv[0] a program, found as exec.Command finds
// it) as a child named name that need not speak the events protocol, with
// env added to this process's environment: Python ranks under shoal run.
// Its output is passed through, one whole line at a time, each prefixed
// with rank as horovodrun does: its stdout to stdout ("[0]<stdout>:"),
// its stderr to the launcher's stderr ("[0]<stderr>:"); a last line
// without its newline is passed on when it exits. Its stdin is empty, and
// Tell tells it nothing. It runs in a process group of its own (on Unix):
// stopping it sends the group SIGTERM, and SIGKILL after the stop grace,
// and whatever of the group outlives the program is killed when it exits.
// Its exit is a Message like any child's.
//
// stdout is written from goroutines of the launcher's: it must take
// concurrent writes (a lockedio.Writer shared by the children).
func (l *Launcher) StartProgram(ctx context.Context, name string, rank int, env []string, stdout io.Writer, argv ...string) (*Child, error) {
	if len(argv) == 0 {
		return nil, fmt.Errorf("starting %s: no program", name)
	}
	cctx, c := l.command(ctx, name, rank, env, argv)
	cmd := c.cmd
	cmd.SysProcAttr = groupAttr(childAttr())
	cmd.Cancel = func() error { return signalGroup(cmd.Process, syscall.SIGTERM) }
	c.tail = &tailBuffer{} // its stderr is on the launcher's already
	out := &prefixWriter{w: stdout, prefix: fmt.Sprintf("[%d]<stdout>:", rank)}
	errs := &prefixWriter{w: l.stderr, prefix: fmt.Sprintf("[%d]<stderr>:", rank)}
	cmd.Stdout, cmd.Stderr = out, errs
	if err := cmd.Start(); err != nil {
		c.cancel()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	l.kids = append(l.kids, c)
	l.wg.Go(func() {
		err := cmd.Wait() // the copying of its output included
		_ = signalGroup(cmd.Process, syscall.SIGKILL)
		if errors.Is(err, exec.ErrWaitDelay) && cmd.ProcessState.Success() {
			err = nil // it exited 0, and what it left running held its output open
		}
		out.Flush()
		errs.Flush()
		l.exited(cctx, c, err)
	})
	return c, nil
}

// command is the child named name running argv, stopped when ctx ends or
// Stop is called: SIGTERM (cmd.Cancel), and SIGKILL after the launcher's
// grace. Its I/O and process attributes are the caller's to set. The
// context returned is the child's: done once it was asked to stop.
func (l *Launcher) command(ctx context.Context, name string, rank int, env, argv []string) (context.Context, *Child) {
	cctx, cancel := context.WithCancel(ctx)
	cmd := exec.CommandContext(cctx, argv[0], argv[1:]...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = l.grace
	return cctx, &Child{name: name, rank: rank, cmd: cmd, cancel: cancel, tail: &tailBuffer{max: 4096}, exited: make(chan struct{})}
}

// exited records c's end, err from cmd.Wait, once everything it wrote was
// read, and posts its exit; cctx is the child's context (command).
func (l *Launcher) exited(cctx context.Context, c *Child, err error) {
	c.err = err
	c.asked = cctx.Err() != nil
	c.cancel()
	close(c.exited)
	l.post(Message{From: c, Exit: true})
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
	if c.stdin == nil {
		return // a program has no control channel
	}
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

// prefixWriter writes whole lines, each with a prefix and in one Write.
// A line longer than maxLine is passed on in pieces of maxLine bytes, each
// a line of its own. Writes come from one goroutine at a time.
type prefixWriter struct {
	w      io.Writer
	prefix string
	buf    []byte
}

// maxLine bounds what a prefixWriter holds of a line it waits to end.
const maxLine = 64 << 10

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.buf = append(p.buf, b...)
	for {
		i := bytes.IndexByte(p.buf, '\n')
		if i < 0 {
			if len(p.buf) < maxLine {
				break
			}
			i = maxLine
			p.line(p.buf[:i])
			p.buf = p.buf[i:]
			continue
		}
		p.line(p.buf[:i])
		p.buf = p.buf[i+1:]
	}
	return len(b), nil
}

// Flush passes on a last line that did not end with a newline.
func (p *prefixWriter) Flush() {
	if len(p.buf) > 0 {
		p.line(p.buf)
		p.buf = p.buf[:0]
	}
}

func (p *prefixWriter) line(l []byte) {
	fmt.Fprintf(p.w, "%s%s\n", p.prefix, l)
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
