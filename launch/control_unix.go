//go:build unix

package launch

import (
	"fmt"
	"io"
	"os"
	"syscall"
	"time"
)

// interruptible returns what to read r through so that a read deadline can
// interrupt a read that waits, and how to undo it. A file the runtime
// polls already has deadlines. A descriptor inherited in blocking mode
// (stdin from a launcher's pipe or a terminal) does not: it is read
// through a duplicate in non-blocking mode, which the runtime polls. The
// mode belongs to the open file, which the duplicate shares, so release
// closes the duplicate and puts the blocking mode back.
func interruptible(r io.Reader) (io.Reader, func(), error) {
	f, ok := r.(*os.File)
	if !ok || f.SetReadDeadline(time.Time{}) == nil {
		return r, func() {}, nil
	}
	orig := int(f.Fd())
	fd, err := syscall.Dup(orig)
	if err != nil {
		return nil, nil, fmt.Errorf("control channel %s: duplicating: %w", f.Name(), err)
	}
	syscall.CloseOnExec(fd)
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		return nil, nil, fmt.Errorf("control channel %s: %w", f.Name(), err)
	}
	d := os.NewFile(uintptr(fd), f.Name())
	return d, func() {
		_ = d.Close()
		_ = syscall.SetNonblock(orig, false)
	}, nil
}
