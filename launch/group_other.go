//go:build !unix

package launch

import (
	"os"
	"syscall"
)

// groupAttr leaves a child where it is: there are no process groups to
// put it in.
func groupAttr(a *syscall.SysProcAttr) *syscall.SysProcAttr { return a }

// signalGroup sends sig to p alone.
func signalGroup(p *os.Process, sig syscall.Signal) error {
	if sig == syscall.SIGKILL {
		return p.Kill()
	}
	return p.Signal(sig)
}
