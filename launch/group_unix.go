//go:build unix

package launch

import (
	"os"
	"syscall"
)

// groupAttr puts a child in a process group of its own, whose id is its
// pid, so that signalGroup reaches what it starts too.
func groupAttr(a *syscall.SysProcAttr) *syscall.SysProcAttr {
	if a == nil {
		a = &syscall.SysProcAttr{}
	}
	a.Setpgid = true
	return a
}

// signalGroup sends sig to the process group p leads (groupAttr).
func signalGroup(p *os.Process, sig syscall.Signal) error {
	return syscall.Kill(-p.Pid, sig)
}
