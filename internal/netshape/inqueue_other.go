//go:build !linux

package netshape

import (
	"errors"
	"net"
	"syscall"
)

// rawConn is nil outside Linux: the receive queue is not read there.
func rawConn(net.Conn) syscall.RawConn { return nil }

func kernelQueue(uintptr) (int, error) { return 0, errors.ErrUnsupported }
