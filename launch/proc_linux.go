package launch

import "syscall"

// childAttr makes a child die with the launcher, even if the launcher is
// killed without a chance to clean up.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
