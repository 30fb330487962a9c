package node

import (
	"log/slog"
	"time"

	"github.com/shoalml/shoal/cluster"
	"github.com/shoalml/shoal/collective"
	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/data"
	"github.com/shoalml/shoal/internal/netshape"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
	pb "github.com/shoalml/shoal/proto/shoalpb"
	"github.com/shoalml/shoal/secure"
	"github.com/shoalml/shoal/timeline"
	"github.com/shoalml/shoal/worker"
)

// WorkerConfig is one training worker process (shoal worker).
type WorkerConfig struct {
	// ID is the worker's place in the job.
	ID     cluster.Identity
	Logger *slog.Logger
	// Model is built and placed by the caller, who frees it; ModelName
	// describes it.
	Model     nn.Model
	ModelName string
	// Train and Test are the datasets; Seed draws the initial weights and
	// the batches.
	Train, Test data.Dataset
	Seed        uint64
	// Loop is the training loop; Progress takes the progress reports.
	Loop     Loop
	Progress func(worker.Progress)
	// Stats are the harness's measurements; Stall logs a worker that
	// finished no step for this long (0: never).
	Stats Stats
	Stall time.Duration
	// Timeline, when set, takes the per-step timeline.
	Timeline *timeline.Writer
	// Events: report as launch events on out, not lines. Eval: evaluate
	// the final weights.
	Events, Eval bool
	// CPUs are the CPUs the worker was bound to, for its report.
	CPUs string
	// CallTimeout is the deadline of each call (pull, push, collective).
	CallTimeout time.Duration
	Creds       *secure.Credentials
	// NIC models a network card (zero: none, but PS workers count bytes).
	NIC netshape.Config
	// Gossip joins the job's membership (nil: off); GossipBind is the
	// address it gossips on, whose host the elastic ring serves on.
	Gossip     Gossip
	GossipBind string
	// MetricsAddr serves Prometheus metrics there; "" none.
	MetricsAddr string
	// PS is the parameter-server modes' config, Ring the ring's.
	PS   PSConfig
	Ring RingConfig
}

// Loop is the training loop's shape.
type Loop struct {
	Mode consistency.Mode
	// TakeServersMode: Mode is a default, not the user's (no --mode): in
	// a parameter-server mode the worker takes the servers' mode, saying
	// so, where the rest of the loop allows it.
	TakeServersMode       bool
	Batch, Epochs         int
	Steps                 int64
	BackwardPasses        int
	PushEvery, FetchEvery int
	Overlap               bool
	ProgressEvery         time.Duration
	// LocalSteps, when > 0, takes that many steps of PSConfig.Inner on
	// the worker between pushes of the pseudo-gradient (worker.Local).
	LocalSteps int
	// Fragments, when > 0 with LocalSteps, synchronises the vector in
	// that many fragments on a staggered schedule (worker.Streaming),
	// FragmentOverlap steps overlapping each exchange and FragmentMix
	// what the merge keeps of the worker's own fragment.
	Fragments, FragmentOverlap int
	FragmentMix                float64
}

// Stats are a worker's statistics for the benchmark harness: step times,
// evaluations every EvalEvery steps, and a stop at StopAt accuracy.
type Stats struct {
	Times     bool
	EvalEvery int64
	StopAt    float64
}

// PSConfig is how a worker trains through parameter servers.
type PSConfig struct {
	// Servers are the shards' addresses in shard order.
	Servers []string
	// Connect bounds dialing and joining; RetryFor how long a call that
	// finds a server unavailable is tried again.
	Connect, RetryFor time.Duration
	// Lanes are the lanes asked for (0: AutoLanes).
	Lanes, AutoLanes int
	// Encoding is the pushes' encoding.
	Encoding pb.Encoding
	// RecordPushes is the file the pushes go to ("" none).
	RecordPushes string
	// Inner is the worker's own optimizer with Loop.LocalSteps.
	Inner optim.Config
	// Host, with PerHost set, aggregates per host (worker.HostGroup).
	Host HostConfig
}

// HostConfig is per-host aggregation: the workers PerHost ranks in a row
// are one host (rank / PerHost), average their gradients over shared
// memory, and the host's first rank alone pushes and pulls, as worker
// rank / PerHost: the shards count hosts (their --workers is the
// number of hosts; sync's barrier and SSP's bound count hosts).
type HostConfig struct {
	// PerHost is the workers of a host (0: no aggregation).
	PerHost int
	// Master is the rendezvous of the host's group, served by its first
	// rank (which listens there; port 0 picks one, said in its listening
	// event under a launcher).
	Master string
	// SharedMemory: the group talks through shared memory (else TCP).
	SharedMemory bool
}

// RingConfig is how a worker trains as a rank of a ring.
type RingConfig struct {
	// Master is rank 0's rendezvous (not for the elastic ring).
	Master, Listen, JobID string
	ReduceOp              string
	Compression           collective.Compression
	Algorithm             collective.Algorithm // the allreduce's
	DesyncEvery           int64
	SharedMemory          bool
	FusionBytes           int
	// DeviceResident keeps the weights and optimizer state on the
	// model's device between steps (worker.RingConfig.Resident): the
	// model must be a worker.ResidentModel (a model on a GPU).
	DeviceResident bool
	Optimizer      optim.Config
	// ScaleLR multiplies the learning rate by the ring's size, which
	// follows the elastic ring's re-forms (worker.RingConfig.ScaleLR).
	ScaleLR bool
	// Elastic: with gossip on, re-form the ring instead of ending.
	Elastic       bool
	MinWorkers    int
	RejoinTimeout time.Duration
	// Secret signs and checks the elastic ring's Reform requests
	// (elastic.Secret of the gossip key); nil: unsigned, as without a key.
	Secret []byte
	// Save is where rank 0 writes the final parameters ("" nowhere).
	Save string
}
