//go:build unix

package launch

import (
	"bufio"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestControl: a "stop" line calls stop, and Close ends the reading while
// a read waits for the next line, whatever the reader; goleak (TestMain)
// checks that no goroutine is left.
func TestControl(t *testing.T) {
	for _, tc := range []struct {
		name string
		// open returns the reader and the writer of the control channel.
		open func(t *testing.T) (io.Reader, io.Writer)
	}{
		{"pipe the runtime polls", func(t *testing.T) (io.Reader, io.Writer) {
			r, w, err := os.Pipe()
			require.NoError(t, err)
			t.Cleanup(func() { r.Close(); w.Close() })
			return r, w
		}},
		{"inherited blocking pipe", blockingPipe},
		{"io.Pipe", func(t *testing.T) (io.Reader, io.Writer) {
			r, w := io.Pipe()
			t.Cleanup(func() { w.Close() })
			return r, w
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, w := tc.open(t)
			stopped := make(chan struct{}, 1)
			c, err := WatchControl(r, func() { stopped <- struct{}{} })
			require.NoError(t, err)
			_, err = io.WriteString(w, "hello\n  stop \n")
			require.NoError(t, err)
			<-stopped
			c.Close() // the goroutine now waits for a line that never comes
			assert.Empty(t, stopped, "stop called once")
		})
	}
	t.Run("reader that ends", func(t *testing.T) {
		stopped := make(chan struct{}, 1)
		c, err := WatchControl(strings.NewReader("stop\n"), func() { stopped <- struct{}{} })
		require.NoError(t, err)
		<-stopped
		c.Close()
	})
}

// TestControlGivesBackABlockingStdin: after Close, a stdin inherited in
// blocking mode is blocking again and still reads.
func TestControlGivesBackABlockingStdin(t *testing.T) {
	r, w := blockingPipe(t)
	f := r.(*os.File)
	c, err := WatchControl(f, func() {})
	require.NoError(t, err)
	c.Close()
	assert.Error(t, f.SetReadDeadline(noDeadline), "the file is still one the runtime does not poll")
	assert.False(t, nonblocking(t, f), "blocking mode put back")
	_, err = io.WriteString(w, "after\n")
	require.NoError(t, err)
	line, err := bufio.NewReader(f).ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "after\n", line)
}

var noDeadline time.Time

// blockingPipe is a pipe whose read end is a file in blocking mode that
// the runtime does not poll, as a child's stdin is.
func blockingPipe(t *testing.T) (io.Reader, io.Writer) {
	var p [2]int
	require.NoError(t, syscall.Pipe(p[:]))
	r, w := os.NewFile(uintptr(p[0]), "stdin"), os.NewFile(uintptr(p[1]), "launcher")
	t.Cleanup(func() { r.Close(); w.Close() })
	require.Error(t, r.SetReadDeadline(noDeadline), "want a file without deadlines")
	return r, w
}

// nonblocking reports whether f's open file is in non-blocking mode.
func nonblocking(t *testing.T, f *os.File) bool {
	flags, _, errno := syscall.Syscall(syscall.SYS_FCNTL, f.Fd(), syscall.F_GETFL, 0)
	require.Zero(t, errno)
	return flags&syscall.O_NONBLOCK != 0
}
