package flags

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/shoalml/shoal/collective"
	"github.com/shoalml/shoal/consistency"
	pb "github.com/shoalml/shoal/proto/shoalpb"
)

// Ring are the flags of ring-allreduce training.
type Ring struct {
	Master       string
	Listen       string
	ReduceOp     string
	Compression  string
	Algorithm    string
	DesyncEvery  int64
	ScaleLR      bool
	SharedMemory bool
	JobID        string
	FusionBytes  int
	// DeviceResident keeps a GPU ring's weights and optimizer state on
	// the device between steps (worker.RingConfig.Resident).
	DeviceResident bool
	// The elastic ring (gossip on).
	Elastic       bool
	MinWorkers    int
	RejoinTimeout time.Duration
}

// Register adds the flags to fs.
func (r *Ring) Register(fs *flag.FlagSet) {
	fs.StringVar(&r.Master, "master", "", SectionRing.Usage("ring: rank 0's rendezvous address HOST:PORT (default: $MASTER_ADDR:$MASTER_PORT); rank 0 listens there"))
	fs.StringVar(&r.Listen, "data-listen", "", SectionRing.Usage("ring: address of this rank's data plane (default: an ephemeral port on the address that reaches the master)"))
	fs.StringVar(&r.ReduceOp, "reduce-op", "average", SectionRing.Usage("ring: how gradients combine: average, sum or adasum"))
	fs.StringVar(&r.Compression, "compression", "none", SectionCommunication.Usage("gradients on the wire (allreduce and PS pushes) as none (float32), fp16 or bf16; sums stay float32; int8 (a scale per 2048 values) for the pseudo-gradients of --local-steps only"))
	fs.StringVar(&r.Algorithm, "allreduce-algorithm", "ring", SectionRing.Usage("ring: the allreduce: ring (2(N-1) rounds of 1/N of a bucket), tree (recursive doubling: log2 N rounds of the whole bucket), hierarchical (reduce-scatter within each host, a ring across hosts per block, allgather within the host; a host is a machine, as for --shared-memory; the flat ring where hosts differ in size) or auto (by collective.ChooseAlgorithmOnHosts)"))
	fs.Int64Var(&r.DesyncEvery, "desync-every", 100, SectionRing.Usage("ring: compare a hash of every rank's parameters every N steps (0: never)"))
	fs.BoolVar(&r.ScaleLR, "scale-lr", false, SectionOptimizer.Usage("multiply the learning rate by the live world size (the linear scaling rule), warming up over the first epoch unless --warmup-steps says otherwise: ring, every rank's by the ring's size, which an elastic ring's re-forms change; PS modes (shoal train), the shards' by the live workers (shoal ps --scale-lr)"))
	fs.BoolVar(&r.SharedMemory, "shared-memory", true, SectionRing.Usage("ring: use shared memory between ranks on the same host"))
	fs.StringVar(&r.JobID, "job-id", "shoal", SectionRing.Usage("ring: a name every rank of one job shares"))
	fs.BoolVar(&r.Elastic, "elastic", true, SectionRing.Usage("ring: with gossip on (--gossip-addr or --join), re-form the ring when a rank dies or joins instead of ending the run"))
	fs.IntVar(&r.MinWorkers, "min-workers", 1, SectionRing.Usage("elastic ring: the fewest ranks it goes on with; below it the job waits --rejoin-timeout for ranks to join, then stops"))
	fs.DurationVar(&r.RejoinTimeout, "rejoin-timeout", 60*time.Second, SectionRing.Usage("elastic ring: how long a re-form may take (a short ring waits this long for ranks to join)"))
	fs.BoolVar(&r.DeviceResident, "device-resident", false, SectionRing.Usage("ring on a GPU (--device cuda): keep the weights and the optimizer's state (sgd, momentum, nesterov, adam, adamw) on the device between steps, the reduced gradient uploaded and the optimizer step run there; the host copy is made for the desync check, evaluations, --save and elastic re-forms. Off by default until measured on a GPU (scripts/gpu-check.sh measures both)"))
	fs.IntVar(&r.FusionBytes, "fusion-bytes", 64<<10, SectionRing.Usage("ring: allreduce gradients in buckets of at least this many bytes while backward runs (0: one allreduce after backward); average and sum only"))
}

// Validate checks the elastic ring's flags.
func (r *Ring) Validate() error {
	if r.MinWorkers < 1 {
		return fmt.Errorf("--min-workers %d: want >= 1", r.MinWorkers)
	}
	if r.RejoinTimeout <= 0 {
		return fmt.Errorf("--rejoin-timeout %v: want > 0", r.RejoinTimeout)
	}
	return nil
}

// CheckResident refuses --device-resident in a mode other than ring,
// which would ignore it.
func (r *Ring) CheckResident(mode consistency.Mode) error {
	if r.DeviceResident && mode != consistency.Ring {
		return fmt.Errorf("--device-resident: for --mode ring, whose ranks run the optimizer themselves; --mode %s would ignore it: leave it out, or run --mode ring", mode)
	}
	return nil
}

// CompressionMode is --compression, parsed, for the ring's allreduce
// (int8 is for parameter-server pseudo-gradients only: PushEncoding).
func (r *Ring) CompressionMode() (collective.Compression, error) {
	if isInt8(r.Compression) {
		return 0, fmt.Errorf("--compression %s: the ring's allreduce sums in none, fp16 or bf16; int8 is for the pseudo-gradients of the PS modes (--mode sync or async with --local-steps)", r.Compression)
	}
	c, err := collective.ParseCompression(r.Compression)
	if err != nil {
		return 0, fmt.Errorf("--compression: %w", err)
	}
	return c, nil
}

// AllreduceAlgorithm is --allreduce-algorithm, parsed.
func (r *Ring) AllreduceAlgorithm() (collective.Algorithm, error) {
	a, err := collective.ParseAlgorithm(r.Algorithm)
	if err != nil {
		return 0, fmt.Errorf("--allreduce-algorithm: %w", err)
	}
	return a, nil
}

func isInt8(s string) bool { return strings.EqualFold(s, "int8") }

// PushEncoding is --compression for parameter-server pushes, of
// pseudo-gradients with localSteps > 0 (--local-steps), of gradients
// without. int8 is for pseudo-gradients only: it rounds every value to
// 1/254 of its block's largest, which the sum of H local steps bears and
// a single step's gradient does not (its small components would round to
// zero every step).
func (r *Ring) PushEncoding(localSteps int) (pb.Encoding, error) {
	if isInt8(r.Compression) {
		if localSteps == 0 {
			return pb.Encoding_FLOAT32, errors.New("--compression int8: for pseudo-gradients only (--local-steps H); gradients travel as none, fp16 or bf16")
		}
		return pb.Encoding_INT8, nil
	}
	c, err := r.CompressionMode()
	switch c {
	case collective.Float16:
		return pb.Encoding_FLOAT16, err
	case collective.BFloat16:
		return pb.Encoding_BFLOAT16, err
	}
	return pb.Encoding_FLOAT32, err
}

// MasterAddr is --master, else MASTER_ADDR:MASTER_PORT (torchrun's).
func (r *Ring) MasterAddr() (string, error) {
	if r.Master != "" {
		return r.Master, nil
	}
	if a, p := os.Getenv("MASTER_ADDR"), os.Getenv("MASTER_PORT"); a != "" && p != "" {
		return a + ":" + p, nil
	}
	return "", fmt.Errorf("--mode ring needs rank 0's address: --master HOST:PORT or MASTER_ADDR and MASTER_PORT")
}
