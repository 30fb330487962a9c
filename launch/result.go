package launch

import (
	"cmp"
	"slices"

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/record"
)

// Result is one training run as `shoal train --json` prints it and the
// benchmark harness reads it (bench.Record.Fill takes a Record's
// measurements from it; package record says why the two stay two types).
type Result struct {
	Mode  consistency.Mode `json:"mode"`
	Model string           `json:"model"`
	// Run is what bench.Record carries too, under the same keys:
	// parameters, batch, optimizer, lr, lanes, parallel_step, steps,
	// samples, start_offsets, curve, test_accuracy.
	record.Run
	// Dataset is what the workers trained on, TestDataset what
	// test_accuracy was measured on.
	Dataset     string `json:"dataset"`
	TestDataset string `json:"test_dataset,omitempty"`
	Workers     int    `json:"workers"`
	Servers     int    `json:"servers"`
	// Threads is each worker's GEMM threads (shoal train --threads, or
	// the cores divided by the workers).
	Threads int `json:"threads,omitempty"`
	// CPUs is, per worker rank, the CPUs it was bound to (shoal train
	// --bind) as the worker itself reported them, in the kernel's list
	// format; nil where the workers were not bound, "" for a worker that
	// did not report.
	CPUs []string `json:"cpus,omitempty"`
	// Device says where the workers computed: "the CPU", "cuda:0", ...
	Device string `json:"device,omitempty"`
	// Precision is what the GPU workers' GEMMs multiplied, bf16 or fp16;
	// empty for fp32.
	Precision     string                `json:"precision,omitempty"`
	Epochs        int                   `json:"epochs"`
	TestLoss      float64               `json:"test_loss"`
	TrainAccuracy float64               `json:"train_accuracy"`
	TrainLoss     float64               `json:"train_loss"`
	SamplesPerSec float64               `json:"samples_per_sec"`
	TrainSeconds  float64               `json:"train_seconds"`
	WallSeconds   float64               `json:"wall_seconds"`
	Staleness     consistency.Staleness `json:"staleness"`
	Dropped       int64                 `json:"dropped_pushes"`
	FailedWorkers []int                 `json:"failed_workers"`
	// MembershipEvents are the workers that died, left before the end or
	// came back during the run, in the order shard 0 saw them.
	MembershipEvents []MembershipEvent `json:"membership_events"`
	Saved            string            `json:"saved,omitempty"`
	// With --stats: the workers' own run time (the longest), where their
	// steps' time went, and their traffic per step.
	WorkerSeconds        float64          `json:"worker_seconds,omitempty"`
	StepTime             *record.StepTime `json:"step_time,omitempty"`
	IdleFraction         float64          `json:"idle_fraction,omitempty"`
	BytesSentPerStep     float64          `json:"bytes_sent_per_step,omitempty"`
	BytesReceivedPerStep float64          `json:"bytes_received_per_step,omitempty"`
	// StoppedAtTarget: the run ended early at --stop-at-accuracy.
	StoppedAtTarget bool `json:"stopped_at_target,omitempty"`
}

// MembershipEvent is one membership change during a run.
type MembershipEvent struct {
	Role string `json:"role"`
	Rank int    `json:"rank"`
	// Change: died, left, rejoined, restarted (a server), or reformed
	// (Role "ring": an elastic ring formed again with the same members;
	// Rank 0, Cause the reason its rank 0 gave).
	Change string `json:"change"`
	// Step is how many steps the worker had pushed to shard 0 when it
	// saw the change (a ring: the steps its new generation starts from);
	// Live how many workers go on.
	Step int64 `json:"step"`
	Live int   `json:"live"`
	// Seconds since training started.
	Seconds float64 `json:"seconds"`
	// Cause is how the process ended, where the launcher saw it end
	// (e.g. "signal killed"); for a ring re-formed, why.
	Cause string `json:"cause,omitempty"`
}

// Tally gathers the workers' events of a run into its Result: the curve
// from eval events; steps, samples, staleness, dropped pushes, worker time
// and step logs from done events. It is a plain state machine: its owner
// feeds it the events it takes from the Launcher.
type Tally struct {
	Result Result
	logs   []rankLog
}

// rankLog is one worker's step log.
type rankLog struct {
	rank int
	log  *StepLog
}

// Add takes one event; kinds other than eval and done are not the tally's.
func (t *Tally) Add(e Event) {
	r := &t.Result
	switch e.Event {
	case Eval:
		r.Curve = append(r.Curve, record.CurvePoint{Seconds: e.Seconds, Step: e.Steps, Accuracy: e.TestAccuracy, Loss: e.TestLoss})
	case Done:
		r.Steps = max(r.Steps, e.Steps)
		r.Samples += int64(e.Samples)
		r.Staleness.Merge(e.Staleness)
		r.Dropped += e.Dropped
		r.WorkerSeconds = max(r.WorkerSeconds, e.Seconds)
		if e.Stopped && e.Rank == 0 {
			r.StoppedAtTarget = true
		}
		if e.Times != nil {
			t.logs = append(t.logs, rankLog{e.Rank, e.Times})
		}
	}
}

// SummariseSteps merges the workers' step logs into the result: phase
// quantiles over every worker's steps but its first (warm-up), the idle
// fraction, and the mean traffic per worker per step after the first.
// Without step logs (no --stats) it leaves them out.
func (t *Tally) SummariseSteps() {
	var all StepLog
	var sent, received float64
	var counted int
	slices.SortStableFunc(t.logs, func(a, b rankLog) int { return cmp.Compare(a.rank, b.rank) })
	var starts []float64
	for _, rl := range t.logs {
		l := rl.log
		if len(l.Step) == 0 {
			continue
		}
		starts = append(starts, l.Start)
		from := 1
		if len(l.Step) == 1 {
			from = 0
		}
		all.Step = append(all.Step, l.Step[from:]...)
		all.Data = append(all.Data, l.Data[from:]...)
		all.Compute = append(all.Compute, l.Compute[from:]...)
		all.Wait = append(all.Wait, l.Wait[from:]...)
		all.Pull = append(all.Pull, l.Pull[from:]...)
		all.Push = append(all.Push, l.Push[from:]...)
		all.Reduce = append(all.Reduce, l.Reduce[from:]...)
		if n := len(l.Step) - 1; n > 0 {
			sent += float64(l.Sent-l.FirstSent) / float64(n)
			received += float64(l.Received-l.FirstReceived) / float64(n)
		} else {
			sent += float64(l.Sent)
			received += float64(l.Received)
		}
		counted++
	}
	if counted == 0 {
		return
	}
	r := &t.Result
	st := record.StepTime{Step: record.QuantilesOf(all.Step), Data: record.QuantilesOf(all.Data), Compute: record.QuantilesOf(all.Compute), Wait: record.QuantilesOf(all.Wait),
		Pull: record.QuantilesOf(all.Pull), Push: record.QuantilesOf(all.Push), Reduce: record.QuantilesOf(all.Reduce)}
	r.StepTime = &st
	if st.Step.Mean > 0 {
		r.IdleFraction = max(0, 1-st.Compute.Mean/st.Step.Mean)
	}
	r.BytesSentPerStep, r.BytesReceivedPerStep = sent/float64(counted), received/float64(counted)
	if first := slices.Min(starts); first > 0 {
		r.StartOffsets = make([]float64, len(starts))
		for i, s := range starts {
			r.StartOffsets[i] = s - first
		}
	}
}
