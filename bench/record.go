package bench

import (
	"time"

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/record"
)

// SchemaVersion names the layout of results.json; bump it when a field
// changes meaning or goes away (adding optional fields does not).
const SchemaVersion = "shoal.bench.train/v1"

// Results is the content of results.json: one harness run.
type Results struct {
	// Schema is SchemaVersion.
	Schema string `json:"schema"`
	// Started is when the harness started (RFC 3339).
	Started time.Time `json:"started"`
	// Command is the exact harness command line (argv).
	Command []string `json:"command"`
	// Revision is the git revision of the shoal binary ("unknown" when it
	// was built without VCS stamping), with "+dirty" if the tree was.
	Revision string `json:"revision"`
	// Machine describes where it ran.
	Machine Machine `json:"machine"`
	// Shaper is the shaper's self-check, when a NIC was modelled.
	Shaper *ShaperCheck `json:"shaper,omitempty"`
	// Runs holds one record per run, in the order they ran.
	Runs []Record `json:"runs"`
	// Simulated marks the results of shoal bench simulate: every record
	// predicted by the simulator (package sim), none measured.
	Simulated bool `json:"simulated,omitempty"`
}

// Machine describes the host of a harness run.
type Machine struct {
	Hostname string `json:"hostname"`
	OS       string `json:"os"`
	Arch     string `json:"arch"`
	CPUModel string `json:"cpu_model"`
	CPUs     int    `json:"cpus"`
	MemBytes int64  `json:"mem_bytes"`
	Go       string `json:"go"`
	// GEMM is the dense-algebra backend the workers use (e.g.
	// "cpu/openblas").
	GEMM string `json:"gemm"`
	// LoadAvg is the 1-minute load average when the harness started.
	LoadAvg float64 `json:"load_avg"`
}

// ShaperCheck is one stream's throughput through the NIC model, measured
// against the configured rate before the runs.
type ShaperCheck struct {
	ConfiguredGbps float64 `json:"configured_gbps"`
	MeasuredGbps   float64 `json:"measured_gbps"`
	Bytes          int64   `json:"bytes"`
	// Ratio is MeasuredGbps / ConfiguredGbps; the harness refuses to run
	// when it is outside [0.9, 1.1].
	Ratio float64 `json:"ratio"`
}

// Record is one run: one mode × workers × servers × model.
type Record struct {
	// ID identifies the run across results files (bench diff matches
	// records by it): "<peer/>model/mode/wN/sS[/nicG]".
	ID string `json:"id"`
	// Peer is empty for Shoal's own runs and names the other system for a
	// peer's run (e.g. "pytorch-ddp-gloo").
	Peer string `json:"peer,omitempty"`
	// Command is the exact command of this run (argv).
	Command []string `json:"command"`

	Mode  string `json:"mode"` // async, sync, ssp, ring (peers: ddp)
	Model string `json:"model"`
	// LocalSteps, when > 0, is the run's --local-steps (DiLoCo: a push
	// and a pull every LocalSteps steps).
	LocalSteps int `json:"local_steps,omitempty"`
	// Run is what launch.Result (shoal train --json) carries too, under
	// the same keys: parameters, batch (per worker), optimizer, lr,
	// lanes, parallel_step, steps, samples, start_offsets, curve and
	// test_accuracy. (It is package record's Run, not this package's
	// planned Run.)
	record.Run
	// VectorBytes is M: the bytes of one full parameter (or gradient)
	// vector on the wire.
	VectorBytes int64  `json:"vector_bytes"`
	Workers     int    `json:"workers"`
	Servers     int    `json:"servers"` // 0 for ring and peers
	Seed        uint64 `json:"seed"`
	// NICGbps is the modelled NIC bandwidth per process and direction (0:
	// not modelled, loopback as it is); RTTMillis its round-trip time.
	NICGbps   float64 `json:"nic_gbps"`
	RTTMillis float64 `json:"rtt_ms"`
	// TrainSeconds is the wall time from the workers' start to the last
	// worker's end; SamplesPerSec = Samples / TrainSeconds.
	TrainSeconds  float64 `json:"train_seconds"`
	SamplesPerSec float64 `json:"samples_per_sec"`
	// ScalingEfficiency is SamplesPerSec / (Workers × the samples/s of the
	// 1-worker run of the same mode and model), when that run exists.
	ScalingEfficiency *float64 `json:"scaling_efficiency,omitempty"`

	// StepTime breaks one step down, over all workers' steps after the
	// first (warm-up) one.
	StepTime StepTime `json:"step_time"`
	// IdleFraction is the share of step time not spent computing:
	// 1 − mean(compute) / mean(step).
	IdleFraction float64 `json:"idle_fraction"`
	// BytesSentPerStep and BytesReceivedPerStep are per worker, mean over
	// the workers, counted on the worker's connections (payload and
	// protocol overhead).
	BytesSentPerStep     float64 `json:"bytes_sent_per_step"`
	BytesReceivedPerStep float64 `json:"bytes_received_per_step"`
	// BytesSentPerSample is BytesSentPerStep over the batch per worker:
	// what a worker sends per sample it trains on, comparable across
	// local steps and batches (shoal train --stats's "sent per sample").
	BytesSentPerSample float64 `json:"bytes_sent_per_sample,omitempty"`

	// Comm compares the measured communication time per step with the
	// analytic model (present when a NIC was modelled).
	Comm *Comm `json:"comm,omitempty"`

	// Staleness counts pushes by staleness (PS modes); in JSON its keys are
	// decimal strings.
	Staleness consistency.Staleness `json:"staleness,omitempty"`

	// TargetAccuracy, when > 0, is the test accuracy the run aimed for;
	// SecondsToTarget and StepsToTarget say when worker 0 first measured
	// it (absent when never).
	TargetAccuracy  float64  `json:"target_accuracy,omitempty"`
	SecondsToTarget *float64 `json:"seconds_to_target,omitempty"`
	StepsToTarget   *int64   `json:"steps_to_target,omitempty"`

	// Error is why the run failed (then most measurements are absent).
	Error string `json:"error,omitempty"`
	// Simulated: the simulator predicted this record (shoal bench
	// simulate); nothing in it was measured but the compute it took as
	// input.
	Simulated bool `json:"simulated,omitempty"`
}

// StepTime, Quantiles and CurvePoint are the measurements a Record
// shares with launch.Result (shoal train --json): one type each, in the
// leaf package record, so that the launcher needs nothing of the harness.
type (
	StepTime   = record.StepTime
	Quantiles  = record.Quantiles
	CurvePoint = record.CurvePoint
)

// Comm is the communication time per step, measured and analytic.
type Comm struct {
	// MeasuredSeconds is mean(pull + push) for the PS modes and
	// mean(reduce) for ring.
	MeasuredSeconds float64 `json:"measured_seconds"`
	// AnalyticSeconds is ring: 2(N−1)/N·M/B; PS: 2·max(M/B, N·M/(S·B))
	// (one pull and one push direction, one after the other).
	AnalyticSeconds float64 `json:"analytic_seconds"`
	// Ratio is MeasuredSeconds / AnalyticSeconds.
	Ratio float64 `json:"ratio"`
}

// QuantilesOf summarises durations in seconds (nearest-rank percentiles).
func QuantilesOf(v []float64) Quantiles { return record.QuantilesOf(v) }
