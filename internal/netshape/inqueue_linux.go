package netshape

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// rawConn returns nc's socket, or nil where nc is not one.
func rawConn(nc net.Conn) syscall.RawConn {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// kernelQueue asks the kernel how many bytes wait in the receive queue of
// socket fd (SIOCINQ).
func kernelQueue(fd uintptr) (int, error) { return unix.IoctlGetInt(int(fd), unix.SIOCINQ) }
