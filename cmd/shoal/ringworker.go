package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/shoalml/shoal/collective"
	pb "github.com/shoalml/shoal/proto/shoalpb"
)

// ringFlags are the flags of ring-allreduce training.
type ringFlags struct {
	master       string
	listen       string
	reduceOp     string
	compression  string
	desyncEvery  int64
	scaleLR      bool
	sharedMemory bool
	jobID        string
	fusionBytes  int
	// The elastic ring (gossip on).
	elastic       bool
	minWorkers    int
	rejoinTimeout time.Duration
}

func (r *ringFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&r.master, "master", "", "ring: rank 0's rendezvous address HOST:PORT (default: $MASTER_ADDR:$MASTER_PORT); rank 0 listens there")
	fs.StringVar(&r.listen, "data-listen", "", "ring: address of this rank's data plane (default: an ephemeral port on the address that reaches the master)")
	fs.StringVar(&r.reduceOp, "reduce-op", "average", "ring: how gradients combine: average, sum or adasum")
	fs.StringVar(&r.compression, "compression", "none", "gradients on the wire (allreduce and PS pushes) as none (float32), fp16 or bf16; sums stay float32")
	fs.Int64Var(&r.desyncEvery, "desync-every", 100, "ring: compare a hash of every rank's parameters every N steps (0: never)")
	fs.BoolVar(&r.scaleLR, "scale-lr", false, "ring: multiply the learning rate by the world size, warming up over the first epoch")
	fs.BoolVar(&r.sharedMemory, "shared-memory", true, "ring: use shared memory between ranks on the same host")
	fs.StringVar(&r.jobID, "job-id", "shoal", "ring: a name every rank of one job shares")
	fs.BoolVar(&r.elastic, "elastic", true, "ring: with gossip on (--gossip-addr or --join), re-form the ring when a rank dies or joins instead of ending the run")
	fs.IntVar(&r.minWorkers, "min-workers", 1, "elastic ring: the fewest ranks it goes on with; below it the job waits --rejoin-timeout for ranks to join, then stops")
	fs.DurationVar(&r.rejoinTimeout, "rejoin-timeout", 60*time.Second, "elastic ring: how long a re-form may take (a short ring waits this long for ranks to join)")
	fs.IntVar(&r.fusionBytes, "fusion-bytes", 64<<10, "ring: allreduce gradients in buckets of at least this many bytes while backward runs (0: one allreduce after backward); average and sum only")
}

func (r *ringFlags) args() []string {
	return []string{"--reduce-op", r.reduceOp, "--compression", r.compression, "--desync-every", strconv.FormatInt(r.desyncEvery, 10),
		"--scale-lr=" + strconv.FormatBool(r.scaleLR), "--shared-memory=" + strconv.FormatBool(r.sharedMemory), "--job-id", r.jobID,
		"--fusion-bytes", strconv.Itoa(r.fusionBytes), "--elastic=" + strconv.FormatBool(r.elastic), "--min-workers", strconv.Itoa(r.minWorkers),
		"--rejoin-timeout", r.rejoinTimeout.String()}
}

// validate checks the elastic ring's flags.
func (r *ringFlags) validate() error {
	if r.minWorkers < 1 {
		return fmt.Errorf("--min-workers %d: want >= 1", r.minWorkers)
	}
	if r.rejoinTimeout <= 0 {
		return fmt.Errorf("--rejoin-timeout %v: want > 0", r.rejoinTimeout)
	}
	return nil
}

func (r *ringFlags) compressionMode() (collective.Compression, error) {
	c, err := collective.ParseCompression(r.compression)
	if err != nil {
		return 0, fmt.Errorf("--compression: %w", err)
	}
	return c, nil
}

// pushEncoding is --compression for parameter-server pushes.
func (r *ringFlags) pushEncoding() (pb.Encoding, error) {
	c, err := r.compressionMode()
	switch c {
	case collective.Float16:
		return pb.Encoding_FLOAT16, err
	case collective.BFloat16:
		return pb.Encoding_BFLOAT16, err
	}
	return pb.Encoding_FLOAT32, err
}

// masterAddr is --master, else MASTER_ADDR:MASTER_PORT (torchrun's).
func (r *ringFlags) masterAddr() (string, error) {
	if r.master != "" {
		return r.master, nil
	}
	if a, p := os.Getenv("MASTER_ADDR"), os.Getenv("MASTER_PORT"); a != "" && p != "" {
		return a + ":" + p, nil
	}
	return "", fmt.Errorf("--mode ring needs rank 0's address: --master HOST:PORT or MASTER_ADDR and MASTER_PORT")
}
