package rpc

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// queued says how many bytes wait unread in c's receive queue (SIOCINQ),
// and whether it could tell (c is a socket, on Linux).
func queued(c net.Conn) (int, bool) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0, false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, false
	}
	var n int
	var qerr error
	if err := rc.Control(func(fd uintptr) { n, qerr = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }); err != nil || qerr != nil {
		return 0, false
	}
	return n, true
}
