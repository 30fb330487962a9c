package cpubind

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Allowed returns the CPUs this process may run on (its affinity mask,
// which a container's cpuset or a launcher's binding narrows), ascending.
func Allowed() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("reading this process's CPUs: %w", err)
	}
	var cpus []int
	for c := range MaxCPU + 1 {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// Bind binds every thread of this process to cpus, each of which must be
// one the process may run on (Allowed). A thread inherits the binding of
// the thread that starts it, so the threads started later (the Go
// runtime's, OpenBLAS's) are bound too. It goes over the threads until a
// pass finds none it has not bound, since the runtime may start one while
// it goes.
func Bind(cpus []int) error {
	allowed, err := Allowed()
	if err != nil {
		return err
	}
	if err := check(cpus, allowed); err != nil {
		return err
	}
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	bound := map[int]bool{}
	for {
		tids, err := threads()
		if err != nil {
			return err
		}
		more := false
		for _, tid := range tids {
			if bound[tid] {
				continue
			}
			if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) { // ESRCH: it has exited
				return fmt.Errorf("binding thread %d to CPUs %s: %w", tid, Format(cpus), err)
			}
			bound[tid], more = true, true
		}
		if !more {
			return nil
		}
	}
}

// threads lists the ids of this process's threads.
func threads() ([]int, error) {
	entries, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, fmt.Errorf("listing this process's threads: %w", err)
	}
	tids := make([]int, 0, len(entries))
	for _, e := range entries {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}
