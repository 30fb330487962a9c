package bench

import (
	"cmp"
	"fmt"
	"math"

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/record"
	"github.com/shoalml/shoal/sim"
)

// SimInput is what a simulated run takes besides its Run: the model's
// shape and the constants of the machine it predicts (its calibration).
type SimInput struct {
	// Layers are the model's tensors' sizes in bytes, in layout order;
	// LayerWork, when known, their shares of backward (sim.Config's).
	Layers    []int64
	LayerWork []float64
	// Batch is per worker; StepsPerEpoch turns a run's Epochs into steps.
	Batch         int
	StepsPerEpoch int64
	// Compute is one step's forward and backward in seconds, Jitter its
	// spread (the σ of a log-normal factor of mean 1).
	Compute, Jitter float64
	// NICGbps and RTTMillis are the modelled NIC, as shoal bench train
	// takes them (0 Gbit/s: no NIC model, the links unlimited).
	NICGbps, RTTMillis float64
	// NICBurst is the depth in bytes of the modelled NIC's token buckets
	// (sim.Config's): netshape.DefaultBurst for a run of shoal bench
	// train through the NIC model, 0 for a real line.
	NICBurst float64
	// ApplyBytesPerSec is the optimizer's speed on a shard or a rank.
	ApplyBytesPerSec float64
	// CPUPerByte and HostCores are the host's cost of a parameter-server
	// transfer and its cores (sim.Config's; 0: not modelled).
	CPUPerByte float64
	HostCores  int
	// Start is when each worker began its first step, in seconds after
	// the first (a measured run's StartOffsets; nil: all at once).
	Start []float64
	// Command is the command line that made the prediction.
	Command []string
}

// Calibrate takes the compute per step from a measured run's compute
// phase: its mean, and its spread as the σ of a log-normal, whose
// p95/p50 is exp(1.645σ) (Jitter stays as it is where p95 is not above
// p50).
func (in *SimInput) Calibrate(compute Quantiles) {
	in.Compute = compute.Mean
	if compute.P50 > 0 && compute.P95 > compute.P50 {
		in.Jitter = math.Log(compute.P95/compute.P50) / 1.645
	}
}

// Simulate predicts run r with the simulator (package sim) and returns
// its record, in the schema of a measured run, under the same ID (so that
// shoal bench diff compares prediction and measurement) and marked
// Simulated. The step-time phases are those the simulator knows: compute,
// and the rest as the PS transfers (Push) or the allreduce (Reduce). What
// the simulator does not model is an error: the peers' modes.
func Simulate(r Run, in SimInput) (Record, error) {
	overlap := r.Mode == modeAsyncOverlap
	mode, err := consistency.Parse(r.Mode)
	if overlap {
		mode, err = consistency.Async, nil
	}
	if err != nil {
		return Record{}, fmt.Errorf("simulate %s: the simulator models async, async-overlap, sync, ssp and ring, not %s", r.Mode, r.Mode)
	}
	steps := r.Steps
	if r.Epochs > 0 {
		steps = int64(r.Epochs) * in.StepsPerEpoch
	}
	if steps < 1 || in.Batch < 1 || in.Compute <= 0 {
		return Record{}, fmt.Errorf("simulate %s: %d steps, batch %d, compute %gs: want all positive", r.Model, steps, in.Batch, in.Compute)
	}
	cfg := sim.Config{Mode: mode, Workers: r.Workers, Servers: r.Servers, Staleness: 1, Batch: in.Batch, Steps: int(steps),
		Layers: in.Layers, LayerWork: in.LayerWork, FusionBytes: 65536, Forward: in.Compute / 3, Backward: 2 * in.Compute / 3, Jitter: in.Jitter, Seed: 1, Overlap: overlap,
		NICGbps: in.NICGbps, NICBurst: in.NICBurst, Latency: in.RTTMillis / 2e3, ApplyBytesPerSec: in.ApplyBytesPerSec, Start: in.Start,
		CPUPerByte: in.CPUPerByte, HostCores: in.HostCores}
	res, err := sim.Run(cfg)
	if err != nil {
		return Record{}, err
	}
	vector := cfg.VectorBytes()
	rec := Record{ID: r.ID("", in.NICGbps), Command: in.Command, Mode: r.Mode, Model: Models[r.Model].Label, VectorBytes: vector,
		Workers: r.Workers, Servers: r.Servers, Seed: 1, NICGbps: in.NICGbps, RTTMillis: in.RTTMillis,
		TrainSeconds: res.Seconds, SamplesPerSec: res.SamplesPerSec, BytesSentPerStep: res.BytesSent, BytesReceivedPerStep: res.BytesReceived,
		Staleness: res.Staleness, Simulated: true, Run: record.Run{Parameters: int(vector / 4), Batch: in.Batch, Optimizer: "momentum",
			Steps: steps, Samples: steps * int64(r.Workers*in.Batch), TestAccuracy: -1}}
	comm := make([]float64, len(res.StepDurations))
	for i, d := range res.StepDurations {
		comm[i] = max(d-res.ComputeDurations[i], 0)
	}
	st := StepTime{Step: QuantilesOf(res.StepDurations), Compute: QuantilesOf(res.ComputeDurations)}
	if mode == consistency.Ring {
		st.Reduce = QuantilesOf(comm)
	} else {
		st.Push = QuantilesOf(comm)
	}
	rec.StepTime = st
	if st.Step.Mean > 0 {
		rec.IdleFraction = max(1-st.Compute.Mean/st.Step.Mean, 0)
	}
	if in.NICGbps > 0 {
		rec.Comm = CommModel(&rec, in.NICGbps)
	}
	return rec, nil
}

// CPUSource is the run a host's CPU cost per byte of a parameter-server
// transfer is fitted to: the first measured async run of 2 or more
// workers without the NIC model (loopback, where that cost is most of the
// step beyond compute), or nil when rs has none.
func CPUSource(rs *Results) *Record {
	for i := range rs.Runs {
		r := &rs.Runs[i]
		if r.Peer == "" && r.Error == "" && r.Mode == consistency.Async.String() && r.NICGbps == 0 && r.Workers >= 2 && r.Servers >= 1 &&
			r.StepTime.Step.Mean > 0 && r.StepTime.Compute.Mean > 0 {
			return r
		}
	}
	return nil
}

// FitCPUPerByte finds the CPU per byte (SimInput.CPUPerByte) with which
// the simulator reproduces the measured mean step of r, a loopback run
// (CPUSource), on in's host (HostCores), by bisection: the step grows
// with the cost. in gives the model and the optimizer's speed; r's own
// compute and start times are taken. It returns 0 when r is no slower
// than the simulator's step with no cost at all, and an error when even
// 100 ns a byte (10 MB/s) is not slow enough.
func FitCPUPerByte(r *Record, in SimInput) (float64, error) {
	run := Run{Model: r.Model, Mode: r.Mode, Workers: r.Workers, Servers: r.Servers, Steps: r.Steps, Loopback: true}
	for k, m := range Models {
		if m.Label == r.Model {
			run.Model = k
		}
	}
	in.Calibrate(r.StepTime.Compute)
	in.NICGbps, in.RTTMillis, in.Start = 0, 0, r.StartOffsets
	step := func(perByte float64) (float64, error) {
		in.CPUPerByte = perByte
		rec, err := Simulate(run, in)
		return rec.StepTime.Step.Mean, err
	}
	want := r.StepTime.Step.Mean
	lo, hi := 0.0, 100e-9
	if s, err := step(lo); err != nil || s >= want {
		return 0, err
	}
	if s, err := step(hi); err != nil || s < want {
		return 0, cmp.Or(err, fmt.Errorf("fitting the CPU per byte to %s: its %.2f ms step is slower than 100 ns a byte makes it (%.2f ms)", r.ID, 1e3*want, 1e3*s))
	}
	for range 40 {
		mid := (lo + hi) / 2
		s, err := step(mid)
		if err != nil {
			return 0, err
		}
		if s < want {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2, nil
}
