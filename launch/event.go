package launch

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/worker"
)

// Event is one line of a child's stdout: the protocol between shoal's
// children (ps, worker, bench ranks) and whoever launched them. Event says
// which kind it is; each kind uses the fields noted beside them.
type Event struct {
	Event string `json:"event"`
	// listening; Gossip is the process's membership address, if any (a
	// PS worker reports only that)
	Addr   string `json:"addr,omitempty"`
	Shard  int    `json:"shard,omitempty"`
	Gossip string `json:"gossip,omitempty"`
	// member: a worker joined, rejoined, left or died (Change) at the
	// shard's step Steps; Live workers go on
	// (Role RingRole, Change Reformed: an elastic ring re-formed with
	// the same members, for Reason)
	Role   string `json:"role,omitempty"`
	Change string `json:"change,omitempty"`
	Live   int    `json:"live,omitempty"`
	Reason string `json:"reason,omitempty"`
	// progress, done
	Rank       int                   `json:"rank,omitempty"`
	Epoch      int                   `json:"epoch,omitempty"`
	Epochs     int                   `json:"epochs,omitempty"`
	Step       int                   `json:"step,omitempty"`
	EpochSteps int                   `json:"epoch_steps,omitempty"`
	Samples    int                   `json:"samples,omitempty"`
	LossSum    float64               `json:"loss_sum,omitempty"`
	Correct    int                   `json:"correct,omitempty"`
	Seconds    float64               `json:"seconds,omitempty"`
	EpochDone  bool                  `json:"epoch_done,omitempty"`
	Steps      int64                 `json:"steps,omitempty"`
	Staleness  consistency.Staleness `json:"staleness,omitempty"`
	Dropped    int64                 `json:"dropped,omitempty"`
	// done, ring; eval: the test metrics
	TestLoss     float64 `json:"test_loss,omitempty"`
	TestAccuracy float64 `json:"test_accuracy,omitempty"`
	TestSamples  int     `json:"test_samples,omitempty"`
	// result: one measurement of shoal bench
	Result *CollRecord `json:"result,omitempty"`
	// done, with --stats: the worker's step times and bytes
	Times *StepLog `json:"times,omitempty"`
	// done: the run ended early at --stop-at-accuracy
	Stopped bool `json:"stopped,omitempty"`
	// done: the CPUs a worker bound to with --cpus may run on, as the
	// kernel lists them (its affinity read back after binding)
	CPUs string `json:"cpus,omitempty"`
	// done, PS modes: the most connections a push-pull to one server
	// went over (--lanes, as the worker resolved it)
	Lanes int `json:"lanes,omitempty"`
}

// The kinds of Event.
const (
	Listening = "listening" // a server or rendezvous is up at Addr, or gossip at Gossip
	Progress  = "progress"  // a worker's running totals
	Eval      = "eval"      // rank 0 measured the test set during the run
	Done      = "done"      // a worker finished its run
	Measured  = "result"    // a benchmark measurement (Result)
	Member    = "member"    // shard 0 saw a worker's membership change
	Metrics   = "metrics"   // a process (Role, Rank) serves Prometheus metrics at Addr
)

// A member event's Role and Change for an elastic ring's re-form that
// kept its members: no worker died, left or joined, the ring was formed
// again (a collective broke or timed out, say), and its steps since the
// last generation's start were kept only where they completed.
const (
	RingRole = "ring"
	Reformed = "reformed"
)

// Emit writes e to w as one line.
func Emit(w io.Writer, e Event) {
	b, err := json.Marshal(e)
	if err != nil {
		panic(fmt.Sprintf("launch: an Event that does not marshal: %v", err)) // its fields are plain data
	}
	fmt.Fprintf(w, "%s\n", b)
}

// ProgressOf is a progress event's content as the worker reported it.
func ProgressOf(e Event) worker.Progress {
	return worker.Progress{Rank: e.Rank, Epoch: e.Epoch, Epochs: e.Epochs, Step: e.Step, EpochSteps: e.EpochSteps, Samples: e.Samples,
		LossSum: e.LossSum, Correct: e.Correct, Elapsed: time.Duration(e.Seconds * float64(time.Second)), EpochDone: e.EpochDone}
}

// ProgressEvent is the progress event of p.
func ProgressEvent(p worker.Progress) Event {
	return Event{Event: Progress, Rank: p.Rank, Epoch: p.Epoch, Epochs: p.Epochs, Step: p.Step, EpochSteps: p.EpochSteps,
		Samples: p.Samples, LossSum: p.LossSum, Correct: p.Correct, Seconds: p.Elapsed.Seconds(), EpochDone: p.EpochDone}
}

// StepLog collects a worker's step times, in seconds, for its done event.
type StepLog struct {
	Step    []float64 `json:"step"`
	Data    []float64 `json:"data"`
	Compute []float64 `json:"compute"`
	Wait    []float64 `json:"wait"`
	Pull    []float64 `json:"pull"`
	Push    []float64 `json:"push"`
	Reduce  []float64 `json:"reduce"`
	// Sent and Received count the bytes this worker's connections carried
	// by the end of its last step; FirstSent and FirstReceived by the end
	// of its first (so setup traffic, e.g. the initial broadcast, stays
	// out of the per-step figures).
	Sent          int64 `json:"sent"`
	Received      int64 `json:"received"`
	FirstSent     int64 `json:"first_sent"`
	FirstReceived int64 `json:"first_received"`
	// Start is when the first step began: Unix seconds, on this machine's
	// clock (the workers of one machine share it, so their starts say how
	// far apart the launcher brought them up).
	Start float64 `json:"start,omitempty"`
	// Counters, when set, reads the byte counters at each step's end.
	Counters func() (sent, received int64) `json:"-"`
}

// Add appends one step's times (worker.Config.OnStep).
func (l *StepLog) Add(t worker.StepTimes) {
	if l.Counters != nil {
		l.Sent, l.Received = l.Counters()
		if len(l.Step) == 0 {
			l.FirstSent, l.FirstReceived = l.Sent, l.Received
		}
	}
	if len(l.Step) == 0 {
		l.Start = float64(time.Now().Add(-t.Step).UnixMicro()) / 1e6
	}
	l.Step = append(l.Step, t.Step.Seconds())
	l.Data = append(l.Data, t.Data.Seconds())
	l.Compute = append(l.Compute, t.Compute.Seconds())
	l.Wait = append(l.Wait, t.Wait.Seconds())
	l.Pull = append(l.Pull, t.Pull.Seconds())
	l.Push = append(l.Push, t.Push.Seconds())
	l.Reduce = append(l.Reduce, t.Reduce.Seconds())
}

// CollRecord is one measurement of `shoal bench allreduce` (and its
// siblings), one line of its --json output.
type CollRecord struct {
	Op        string  `json:"op"`
	NP        int     `json:"np"`
	Bytes     int64   `json:"bytes"`
	Seconds   float64 `json:"seconds"`
	AlgBW     float64 `json:"algbw_gbps"`
	BusBW     float64 `json:"busbw_gbps"`
	Correct   bool    `json:"correct"`
	Transport string  `json:"transport"`
}
