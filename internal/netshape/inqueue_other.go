//go:build !linux

package netshape

import "net"

// kernelQueue cannot read the receive queue outside Linux.
func kernelQueue(net.Conn) (int, bool) { return 0, false }
