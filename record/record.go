package record

import (
	"math"
	"slices"
)

// Run is the part of a training run's record that `shoal train --json`
// (launch.Result) and the harness's results.json (bench.Record) both
// carry under the same keys with the same meaning: what was trained
// (parameters, batch, optimizer, learning rate, how the PS push-pulls
// ran), how far (steps, samples), when the workers began, the test
// accuracy during and after the run. Both embed it, so its fields are
// the reports' own in Go and in JSON, and the harness takes a record's
// from shoal train's summary in one assignment (bench.Record.Fill).
type Run struct {
	// Parameters is the model's parameter count.
	Parameters int `json:"parameters"`
	// Batch is each worker's batch, Optimizer and LR the algorithm and
	// its (initial) learning rate.
	Batch     int     `json:"batch"`
	Optimizer string  `json:"optimizer"`
	LR        float64 `json:"lr"`
	// Lanes and ParallelStep are how the PS modes' push-pulls ran: the
	// most connections a worker split one to a server over, as the
	// workers reported them (shoal train --lanes, or its choice for the
	// machine, at most one per chunk of a server's share), and whether
	// the servers updated their chunks on several goroutines (shoal
	// train --parallel-step; only shares of several chunks and 65,536
	// floats or more step in parallel, smaller ones serially all the
	// same).
	Lanes        int  `json:"lanes,omitempty"`
	ParallelStep bool `json:"parallel_step,omitempty"`
	// Steps is the number of steps each worker ran (the largest over the
	// workers); Samples the samples all workers processed together.
	Steps   int64 `json:"steps"`
	Samples int64 `json:"samples"`
	// StartOffsets are when each worker that reported its steps began its
	// first, in seconds after the first to begin, in rank order (with
	// shoal train --stats; the simulator starts its workers at these
	// times).
	StartOffsets []float64 `json:"start_offsets,omitempty"`
	// Curve is rank 0's test accuracy during the run, every few steps
	// (shoal train --eval-every).
	Curve []CurvePoint `json:"curve,omitempty"`
	// TestAccuracy is the final weights' test accuracy (the harness
	// writes −1 for a run that did not evaluate).
	TestAccuracy float64 `json:"test_accuracy"`
}

// StepTime is the per-step time of each phase, in seconds. Compute is
// forward and backward; Data is waiting for the input pipeline; Wait is
// blocking before any byte moves (a sync barrier, the SSP bound); Pull and
// Push are the PS transfers (Push includes the next step's weights when a
// push-pull brings them); Reduce the ring allreduce.
type StepTime struct {
	Step    Quantiles `json:"step"`
	Compute Quantiles `json:"compute"`
	Data    Quantiles `json:"data"`
	Wait    Quantiles `json:"wait"`
	Pull    Quantiles `json:"pull"`
	Push    Quantiles `json:"push"`
	Reduce  Quantiles `json:"reduce"`
}

// Quantiles summarise a phase's durations over steps, in seconds.
type Quantiles struct {
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P95  float64 `json:"p95"`
}

// CurvePoint is one test evaluation during a run.
type CurvePoint struct {
	Seconds  float64 `json:"seconds"` // since the workers started
	Step     int64   `json:"step"`
	Accuracy float64 `json:"accuracy"`
	Loss     float64 `json:"loss"`
}

// QuantilesOf summarises durations in seconds (nearest-rank percentiles).
func QuantilesOf(v []float64) Quantiles {
	if len(v) == 0 {
		return Quantiles{}
	}
	s := slices.Clone(v)
	slices.Sort(s)
	var total float64
	for _, x := range s {
		total += x
	}
	rank := func(p float64) float64 { return s[max(0, int(math.Ceil(p*float64(len(s))))-1)] }
	return Quantiles{Mean: total / float64(len(s)), P50: rank(0.50), P95: rank(0.95)}
}
