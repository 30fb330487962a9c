package flags

import (
	"flag"
	"fmt"
	"time"

	"github.com/shoalml/shoal/internal/netshape"
)

// NIC models a network card for benchmarks on one machine.
type NIC struct {
	Gbps float64
	RTT  time.Duration
}

// Register adds the flags to fs.
func (n *NIC) Register(fs *flag.FlagSet) {
	fs.Float64Var(&n.Gbps, "nic-gbps", 0, SectionCommunication.Usage("model a NIC of this many Gbit/s per direction, shared by all of this process's connections (0: loopback as it is); for benchmarks"))
	fs.DurationVar(&n.RTT, "rtt", 0, SectionCommunication.Usage("with --nic-gbps: round-trip time added between processes"))
}

// Args renders the flags for a child process.
func (n *NIC) Args() []string {
	return []string{"--nic-gbps", FormatFloat(n.Gbps), "--rtt", n.RTT.String()}
}

// Config is the NIC model's config.
func (n *NIC) Config() netshape.Config { return netshape.Config{Gbps: n.Gbps, RTT: n.RTT} }

// Shaped reports whether a NIC is modelled.
func (n *NIC) Shaped() bool { return n.Gbps > 0 || n.RTT > 0 }

// Validate checks the flags.
func (n *NIC) Validate() error {
	if n.Gbps < 0 || n.RTT < 0 {
		return fmt.Errorf("--nic-gbps %g --rtt %v: want >= 0", n.Gbps, n.RTT)
	}
	if n.RTT > 0 && n.Gbps == 0 {
		return fmt.Errorf("--rtt %v needs --nic-gbps", n.RTT)
	}
	_, err := netshape.New(n.Config())
	if err != nil {
		return fmt.Errorf("--nic-gbps %g --rtt %v: %w", n.Gbps, n.RTT, err)
	}
	return nil
}

// Stats are a worker's statistics for the benchmark harness.
type Stats struct {
	Times     bool // --stats: per-step phase times and bytes moved
	EvalEvery int64
	StopAt    float64
}

// Register adds the flags to fs.
func (s *Stats) Register(fs *flag.FlagSet) {
	fs.BoolVar(&s.Times, "stats", false, SectionOutput.Usage("report per-step phase times and bytes moved (the benchmark harness's measurements)"))
	fs.Int64Var(&s.EvalEvery, "eval-every", 0, SectionModel.Usage("rank 0 evaluates on the test set every N steps and reports it (0: only at the end)"))
	fs.Float64Var(&s.StopAt, "stop-at-accuracy", 0, SectionModel.Usage("with --eval-every: stop the run once rank 0 measures this test accuracy (0 to 1; 0: never)"))
}

// Validate checks the flags.
func (s *Stats) Validate() error {
	if s.EvalEvery < 0 {
		return fmt.Errorf("--eval-every %d: want >= 0", s.EvalEvery)
	}
	if !(s.StopAt >= 0 && s.StopAt <= 1) {
		return fmt.Errorf("--stop-at-accuracy %g: want 0 to 1", s.StopAt)
	}
	if s.StopAt > 0 && s.EvalEvery == 0 {
		return fmt.Errorf("--stop-at-accuracy %g needs --eval-every (how often to measure it)", s.StopAt)
	}
	return nil
}
