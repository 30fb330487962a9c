package main

import (
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/shoalml/shoal/internal/netshape"
)

// nicFlags model a network card for benchmarks on one machine.
type nicFlags struct {
	gbps float64
	rtt  time.Duration
}

func (n *nicFlags) register(fs *flag.FlagSet) {
	fs.Float64Var(&n.gbps, "nic-gbps", 0, "model a NIC of this many Gbit/s per direction, shared by all of this process's connections (0: loopback as it is); for benchmarks")
	fs.DurationVar(&n.rtt, "rtt", 0, "with --nic-gbps: round-trip time added between processes")
}

func (n *nicFlags) args() []string {
	return []string{"--nic-gbps", fmtFloat(n.gbps), "--rtt", n.rtt.String()}
}

func (n *nicFlags) config() netshape.Config { return netshape.Config{Gbps: n.gbps, RTT: n.rtt} }

// shaped reports whether a NIC is modelled.
func (n *nicFlags) shaped() bool { return n.gbps > 0 || n.rtt > 0 }

func (n *nicFlags) validate() error {
	if n.gbps < 0 || n.rtt < 0 {
		return fmt.Errorf("--nic-gbps %g --rtt %v: want >= 0", n.gbps, n.rtt)
	}
	if n.rtt > 0 && n.gbps == 0 {
		return fmt.Errorf("--rtt %v needs --nic-gbps", n.rtt)
	}
	_, err := netshape.New(n.config())
	if err != nil {
		return fmt.Errorf("--nic-gbps %g --rtt %v: %w", n.gbps, n.rtt, err)
	}
	return nil
}

// statFlags are a worker's statistics for the benchmark harness.
type statFlags struct {
	stats     bool
	evalEvery int64
	stopAt    float64
}

func (s *statFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&s.stats, "stats", false, "report per-step phase times and bytes moved (the benchmark harness's measurements)")
	fs.Int64Var(&s.evalEvery, "eval-every", 0, "rank 0 evaluates on the test set every N steps and reports it (0: only at the end)")
	fs.Float64Var(&s.stopAt, "stop-at-accuracy", 0, "with --eval-every: stop the run once rank 0 measures this test accuracy (0 to 1; 0: never)")
}

func (s *statFlags) args() []string {
	return []string{"--stats=" + strconv.FormatBool(s.stats), "--eval-every", strconv.FormatInt(s.evalEvery, 10), "--stop-at-accuracy", fmtFloat(s.stopAt)}
}

func (s *statFlags) validate() error {
	if s.evalEvery < 0 {
		return fmt.Errorf("--eval-every %d: want >= 0", s.evalEvery)
	}
	if !(s.stopAt >= 0 && s.stopAt <= 1) {
		return fmt.Errorf("--stop-at-accuracy %g: want 0 to 1", s.stopAt)
	}
	if s.stopAt > 0 && s.evalEvery == 0 {
		return fmt.Errorf("--stop-at-accuracy %g needs --eval-every (how often to measure it)", s.stopAt)
	}
	return nil
}
