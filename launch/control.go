package launch

import (
	"bufio"
	"io"
	"strings"
	"sync"
	"time"
)

// Stop is the control line (Tell) that asks a child to end its run
// cleanly, keeping what it did so far.
const Stop = "stop"

// Control is a child's side of its control channel: it reads the lines its
// launcher sends on its stdin (Tell) in a goroutine it owns, and calls stop
// on a "stop" line. Close ends the reading and waits for the goroutine.
type Control struct {
	in      io.Reader // what the goroutine reads
	release func()    // undoes what made in interruptible
	wg      sync.WaitGroup
}

// WatchControl starts reading control lines from r, usually the child's
// stdin. Close must interrupt a read that waits for a line: it sets a read
// deadline where r has one, else closes r where it is an io.Closer, else
// waits for r to end. A stdin inherited in blocking mode (a launcher's
// pipe, a terminal) has no deadline; on Unix WatchControl reads it through
// a non-blocking duplicate that has one, and Close puts the blocking mode
// back.
func WatchControl(r io.Reader, stop func()) (*Control, error) {
	in, release, err := interruptible(r)
	if err != nil {
		return nil, err
	}
	c := &Control{in: in, release: release}
	c.wg.Go(func() {
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			if strings.TrimSpace(sc.Text()) == Stop {
				stop()
			}
		}
	})
	return c, nil
}

// Close interrupts the reading, waits for its goroutine to return, and
// releases what WatchControl set up. stop is not called after Close.
func (c *Control) Close() {
	if d, ok := c.in.(interface{ SetReadDeadline(time.Time) error }); !ok || d.SetReadDeadline(time.Now()) != nil {
		if cl, ok := c.in.(io.Closer); ok {
			_ = cl.Close()
		}
	}
	c.wg.Wait()
	c.release()
}
