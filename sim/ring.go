package sim

import (
	"math/bits"

	"github.com/shoalml/shoal/collective"
)

// The ring. Each bucket's allreduce is 2(N−1) rounds (reduce-scatter,
// then allgather) in which every rank sends 1/N of the bucket to the
// next rank over its own link, all links at once: with every NIC alike
// a round takes seg/B plus the latency, and the ranks keep in step, so a
// bucket's allreduce starts once every rank has it ready and has reduced
// the bucket before, and takes 2(N−1)·(seg/B + latency). Buckets are
// reduced one after the other while backward goes on.

// buckets cuts the layers, last first as backward produces them, into
// buckets of at least FusionBytes (one bucket when it is 0), each with
// the fraction of backward done when it is ready (by LayerWork, else by
// the layers' sizes).
func (c Config) buckets() (sizes, readyAt []float64) {
	work := c.LayerWork
	if work == nil {
		work = make([]float64, len(c.Layers))
		for i, l := range c.Layers {
			work[i] = float64(l)
		}
	}
	var total float64
	for _, w := range work {
		total += w
	}
	var acc, done float64
	for i := len(c.Layers) - 1; i >= 0; i-- {
		acc += float64(c.Layers[i])
		done += work[i]
		if c.FusionBytes > 0 && acc >= float64(c.FusionBytes) && i > 0 {
			sizes, readyAt = append(sizes, acc), append(readyAt, done/total)
			acc = 0
		}
	}
	if acc > 0 {
		sizes, readyAt = append(sizes, acc), append(readyAt, 1)
	}
	return sizes, readyAt
}

// allreduceRounds is how an allreduce of a bucket of size bytes goes by
// Config.Allreduce: its rounds, each a latency and perRound bytes through
// every rank's NIC each way. The ring: 2(N−1) rounds of size/N.
// Recursive doubling (collective.Tree): log2(p) rounds of the whole
// bucket, p the largest power of two up to N, and two more (the fold to
// p ranks and the result back) where N is not one; its ranks' traffic.
func (c Config) allreduceRounds(size float64) (rounds, perRound float64) {
	n := c.Workers
	alg := c.Allreduce
	if alg == collective.Auto {
		alg = collective.ChooseAlgorithm(int(size), n)
	}
	if alg != collective.Tree {
		return 2 * float64(n-1), size / float64(n)
	}
	r := bits.Len(uint(n)) - 1
	if n&(n-1) != 0 {
		r += 2
	}
	return float64(r), size
}

// ringState is the ring's progress.
type ringState struct {
	readyAt []float64 // per bucket of the current step, when the last rank has it
	bwdEnd  []float64 // per rank, when its backward of this step ends
	step    int
}

func (j *job) startRing() error {
	j.bucketSizes, j.bucketReady = j.cfg.buckets()
	j.ring = &ringState{readyAt: make([]float64, len(j.bucketSizes)), bwdEnd: make([]float64, j.cfg.Workers)}
	for _, w := range j.workers {
		w.cpu.free = j.start(w.id)
	}
	j.ringStep()
	return nil
}

// ringStep starts every rank's next step: forward, then backward, which
// makes the buckets ready as it goes. A bucket is reduced once the last
// rank has it and the bucket before is reduced, so the step is worked
// out here, when it starts, from each rank's compute: the ring's
// arithmetic needs no event per rank and bucket, only one at its end.
func (j *job) ringStep() {
	rs := j.ring
	if rs.step == j.cfg.Steps {
		return
	}
	for k := range rs.readyAt {
		rs.readyAt[k] = 0
	}
	for i, w := range j.workers {
		f, b := j.computeTime()
		w.compute += f + b
		w.stepCompute = f + b
		start := max(j.e.now, w.cpu.free)
		rs.bwdEnd[i] = start + f + b
		w.cpu.free = rs.bwdEnd[i]
		for k, at := range j.bucketReady {
			rs.readyAt[k] = max(rs.readyAt[k], start+f+b*at)
		}
	}
	j.ringReduce()
}

// ringReduce reduces the step's buckets in order, each once every rank
// has it and the one before is done, then has every rank apply the
// optimizer step once the last is reduced; the step ends with the
// slowest.
func (j *job) ringReduce() {
	rs := j.ring
	commEnd := 0.0
	var moved float64
	for k, size := range j.bucketSizes {
		rounds, perRound := j.cfg.allreduceRounds(size)
		round := j.cfg.Latency
		if j.net.bps > 0 {
			round += perRound / j.net.bps
		}
		commEnd = max(commEnd, rs.readyAt[k]) + rounds*round
		moved += rounds * perRound
	}
	for _, w := range j.workers {
		w.nic.sent += moved
		w.nic.received += moved
	}
	apply := j.applyTime(float64(j.cfg.VectorBytes()))
	end := commEnd
	for i := range j.workers {
		end = max(end, rs.bwdEnd[i])
	}
	j.e.at(end+apply, func() {
		for _, w := range j.workers {
			w.cpu.free = j.e.now
			j.stepDone(w)
		}
		rs.step++
		j.ringStep()
	})
}
