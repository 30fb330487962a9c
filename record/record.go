package record

import (
	"math"
	"slices"
)

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
