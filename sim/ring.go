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

// allreduceCost is what an allreduce of a bucket of size bytes costs by
// Config.Allreduce: its time, and the bytes each rank sends. A round is
// a latency plus its bytes through the link at its rate (nicBps: the
// NIC's, 0 infinite).
//
// The ring: 2(N−1) rounds of size/N (with hosts, each the slower of a
// NIC hop and a host hop). Recursive doubling (collective.Tree):
// log2(p) rounds of the whole bucket, p the largest power of two up to
// N, and two more (the fold to p ranks and the result back) where N is
// not one; its ranks' traffic. On hosts of L ranks (N and L powers of
// two) its log2(L) rounds of a distance under L are host hops, and the
// log2(N/L) others NIC hops of L vectors, a host's ranks at once.
// Hierarchical, L ranks a host and H =
// N/L hosts: 2(L−1) rounds of size/L over the host's links (the
// reduce-scatter and the allgather) and 2(H−1) rounds of size/N a rank
// across hosts, L ranks at once through the host's NIC, size/H a round.
func (c Config) allreduceCost(size, nicBps float64) (seconds, sent float64) {
	n := c.Workers
	L := c.RanksPerHost
	if L < 2 || n%L != 0 {
		L = 1
	}
	alg := c.Allreduce
	if alg == collective.Auto {
		per := L
		if c.RanksPerHost > 1 && per == 1 {
			per = 0 // hosts of different sizes
		}
		alg = collective.ChooseAlgorithmOnHosts(int(size), n, per)
	}
	hop := func(latency, bytes, bps float64) float64 {
		if bps > 0 {
			return latency + bytes/bps
		}
		return latency
	}
	intraBps := c.IntraGbps * 1e9 / 8
	N := float64(n)
	switch {
	case alg == collective.Tree && L > 1 && n&(n-1) == 0 && L&(L-1) == 0:
		// Rounds of a distance under L pair ranks of one host; the others
		// pair every rank of a host with one of another host at once, L
		// vectors through the host's NIC each way.
		host, cross := float64(bits.Len(uint(L))-1), float64(bits.Len(uint(n/L))-1)
		return host*hop(c.IntraLatency, size, intraBps) + cross*hop(c.Latency, float64(L)*size, nicBps), (host + cross) * size
	case alg == collective.Tree:
		r := float64(bits.Len(uint(n)) - 1)
		if n&(n-1) != 0 {
			r += 2
		}
		return r * hop(c.Latency, size, nicBps), r * size
	case alg == collective.Hierarchical && L > 1:
		l, h := float64(L), N/float64(L)
		host := 2 * (l - 1) * hop(c.IntraLatency, size/l, intraBps)
		cross := 2 * (h - 1) * hop(c.Latency, size/h, nicBps)
		return host + cross, 2*(l-1)*size/l + 2*(h-1)*size/N
	}
	round := hop(c.Latency, size/N, nicBps)
	if L > 1 {
		round = max(round, hop(c.IntraLatency, size/N, intraBps))
	}
	return 2 * (N - 1) * round, 2 * (N - 1) * size / N
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
		secs, sent := j.cfg.allreduceCost(size, j.net.bps)
		commEnd = max(commEnd, rs.readyAt[k]) + secs
		moved += sent
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
