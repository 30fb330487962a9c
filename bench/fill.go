package bench

import "github.com/shoalml/shoal/launch"

// Fill sets what rec measures from r, shoal train's summary of the run:
// the record.Run both carry (model size, optimizer, lanes and step,
// steps, samples, start offsets, curve and final accuracy) in one
// assignment, and what the record derives or keeps differently: the
// vector's bytes, the time and throughput over the workers' own time
// (r's train_seconds is the launcher's clock), step times, traffic and
// staleness (present in the record only where measured). What names the
// run (ID, command, mode, workers, network) is the harness's to set.
func (rec *Record) Fill(r *launch.Result) {
	rec.Run = r.Run
	rec.VectorBytes = 4 * int64(r.Parameters)
	rec.TrainSeconds = r.WorkerSeconds
	if rec.TrainSeconds > 0 {
		rec.SamplesPerSec = float64(r.Samples) / rec.TrainSeconds
	}
	if r.StepTime != nil {
		rec.StepTime = *r.StepTime
	}
	rec.IdleFraction = r.IdleFraction
	rec.BytesSentPerStep, rec.BytesReceivedPerStep = r.BytesSentPerStep, r.BytesReceivedPerStep
	rec.Staleness = nil
	if len(r.Staleness) > 0 {
		rec.Staleness = r.Staleness
	}
}
