package bench

import "github.com/shoalml/shoal/consistency"

// CommModel compares the measured communication time per step of rec
// with the analytic one for a NIC of gbps Gbit/s: ring 2(N−1)/N·M/B; PS
// with S servers max(M/B, N·M/(S·B)) per direction, a pull and a push one
// after the other, or both at once with async-overlap. It returns nil when
// the run has no communication (one ring rank).
func CommModel(rec *Record, gbps float64) *Comm {
	b := gbps * 1e9 / 8
	m := float64(rec.VectorBytes)
	n, s := float64(rec.Workers), float64(rec.Servers)
	var analytic, measured float64
	if rec.Mode == consistency.Ring.String() {
		analytic = 2 * (n - 1) / n * m / b
		measured = rec.StepTime.Reduce.Mean
	} else {
		analytic = 2 * max(m/b, n*m/(s*b))
		if rec.Mode == modeAsyncOverlap {
			analytic /= 2 // the two directions at once
		}
		if rec.LocalSteps > 1 {
			analytic /= float64(rec.LocalSteps) // one exchange a round
		}
		measured = rec.StepTime.Pull.Mean + rec.StepTime.Push.Mean
	}
	if analytic == 0 {
		return nil // one ring rank: nothing to send
	}
	return &Comm{MeasuredSeconds: measured, AnalyticSeconds: analytic, Ratio: measured / analytic}
}

// ToTarget fills rec's time and steps to its target accuracy from its
// curve: the first point at or above the target (none when never).
func ToTarget(rec *Record) {
	if rec.TargetAccuracy <= 0 {
		return
	}
	for _, p := range rec.Curve {
		if p.Accuracy >= rec.TargetAccuracy {
			sec, step := p.Seconds, p.Step
			rec.SecondsToTarget, rec.StepsToTarget = &sec, &step
			return
		}
	}
}

// ScalingEfficiency sets each record's samples/s against N times the
// 1-worker run of the same system, mode, model, servers and network.
// Records without such a run (or that failed) keep a nil efficiency.
func ScalingEfficiency(runs []Record) {
	for i := range runs {
		r := &runs[i]
		if r.Error != "" || r.SamplesPerSec == 0 {
			continue
		}
		for _, base := range runs {
			if base.Workers == 1 && base.Error == "" && base.SamplesPerSec > 0 && base.Peer == r.Peer && base.Mode == r.Mode &&
				base.Model == r.Model && base.Servers == r.Servers && base.NICGbps == r.NICGbps {
				e := r.SamplesPerSec / (float64(r.Workers) * base.SamplesPerSec)
				r.ScalingEfficiency = &e
				break
			}
		}
	}
}
