package bench

import "github.com/shoalml/shoal/launch"

// Fill sets what rec measures from r, shoal train's summary of the run:
// the run's model size, optimizer, lanes and step, steps, samples,
// throughput over the workers' own time, step times, traffic, staleness,
// curve and final accuracy. What names the run (ID,
// command, mode, workers, network) is the harness's to set.
func (rec *Record) Fill(r *launch.Result) {
	rec.Parameters, rec.VectorBytes = r.Parameters, 4*int64(r.Parameters)
	rec.Batch, rec.Optimizer, rec.LR = r.Batch, r.Optimizer, r.LR
	rec.Lanes, rec.ParallelStep = r.Lanes, r.ParallelStep
	rec.Steps, rec.Samples = r.Steps, r.Samples
	rec.TrainSeconds = r.WorkerSeconds
	if rec.TrainSeconds > 0 {
		rec.SamplesPerSec = float64(r.Samples) / rec.TrainSeconds
	}
	if r.StepTime != nil {
		rec.StepTime = *r.StepTime
	}
	rec.IdleFraction = r.IdleFraction
	rec.StartOffsets = r.StartOffsets
	rec.BytesSentPerStep, rec.BytesReceivedPerStep = r.BytesSentPerStep, r.BytesReceivedPerStep
	rec.Staleness = nil
	if len(r.Staleness) > 0 {
		rec.Staleness = r.Staleness
	}
	rec.Curve = r.Curve
	rec.TestAccuracy = r.TestAccuracy
}
