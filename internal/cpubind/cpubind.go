// Package cpubind binds a process to CPUs, as MPI launchers bind their
// ranks to cores (Open MPI's --bind-to core): shoal train gives each of
// its workers cores of its own, so that a worker's GEMMs keep their
// caches and the scheduler does not move it onto the core another worker
// computes on.
package cpubind

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MaxCPU bounds the CPU numbers Parse takes: the kernel's default
// CONFIG_NR_CPUS ceiling, and the size of the masks Bind passes.
const MaxCPU = 1023

// ErrUnsupported is Allowed's and Bind's error where the system cannot
// bind threads to CPUs (every system but Linux, here).
var ErrUnsupported = errors.New("binding to CPUs needs Linux")

// Parse reads a CPU list as the kernel writes one (Cpus_allowed_list,
// taskset -c): numbers and ranges, comma-separated ("0-3,8,10-11"). It
// returns the CPUs ascending, each once.
func Parse(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("an empty CPU list: want CPU numbers and ranges such as 0-3,8")
	}
	var cpus []int
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		first, err := cpuNumber(lo, part)
		if err != nil {
			return nil, err
		}
		last := first
		if isRange {
			if last, err = cpuNumber(hi, part); err != nil {
				return nil, err
			}
			if last < first {
				return nil, fmt.Errorf("CPU range %q: its end is below its start", part)
			}
		}
		for c := first; c <= last; c++ {
			cpus = append(cpus, c)
		}
	}
	slices.Sort(cpus)
	return slices.Compact(cpus), nil
}

func cpuNumber(s, part string) (int, error) {
	c, err := strconv.Atoi(s)
	if err != nil || c < 0 || c > MaxCPU {
		return 0, fmt.Errorf("%q in a CPU list: want a CPU number 0..%d or a range of them such as 0-3", part, MaxCPU)
	}
	return c, nil
}

// Format writes cpus (ascending) as Parse reads them, runs as ranges.
func Format(cpus []int) string {
	var b strings.Builder
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(cpus[i]))
		if j > i {
			b.WriteString("-" + strconv.Itoa(cpus[j]))
		}
		i = j + 1
	}
	return b.String()
}

// Split gives each of n processes per CPUs of its own from allowed, in
// order: process i gets allowed[i·per : (i+1)·per]. ok is false where
// allowed has fewer than n·per CPUs.
func Split(allowed []int, n, per int) (sets [][]int, ok bool) {
	if n < 1 || per < 1 || n*per > len(allowed) {
		return nil, false
	}
	for i := range n {
		sets = append(sets, slices.Clone(allowed[i*per:(i+1)*per]))
	}
	return sets, true
}

// check refuses a set to bind to that is empty or has a CPU outside
// allowed (the kernel would drop such a CPU without a word).
func check(cpus, allowed []int) error {
	if len(cpus) == 0 {
		return errors.New("binding to no CPUs at all")
	}
	for _, c := range cpus {
		if _, found := slices.BinarySearch(allowed, c); !found {
			return fmt.Errorf("CPU %d is not one this process may run on (%s)", c, Format(allowed))
		}
	}
	return nil
}
