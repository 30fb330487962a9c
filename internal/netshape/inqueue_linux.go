package netshape

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// kernelQueue asks the kernel how many bytes wait in nc's receive queue
// (SIOCINQ).
func kernelQueue(nc net.Conn) (int, bool) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return 0, false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, false
	}
	var n int
	cerr := rc.Control(func(fd uintptr) { n, err = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
	if cerr != nil || err != nil {
		return 0, false
	}
	return n, true
}
