package sim

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

// ringBucket is one bucket of one step across the ranks.
type ringBucket struct {
	ready int     // ranks that have it
	at    float64 // when the last of them had it
}

// ringState is the ring's progress.
type ringState struct {
	buckets []ringBucket // per bucket of the current step
	next    int          // the next bucket to reduce
	commEnd float64      // when the previous bucket's allreduce ended
	bwdEnd  []float64    // per rank, when its backward of this step ends
	step    int
}

func (j *job) startRing() error {
	j.bucketSizes, j.bucketReady = j.cfg.buckets()
	j.ring = &ringState{bwdEnd: make([]float64, j.cfg.Workers)}
	for _, w := range j.workers {
		w.cpu.free = j.start(w.id)
	}
	j.ringStep()
	return nil
}

// ringStep starts every rank's next step: forward, then backward, which
// makes the buckets ready as it goes.
func (j *job) ringStep() {
	rs := j.ring
	if rs.step == j.cfg.Steps {
		return
	}
	rs.buckets = make([]ringBucket, len(j.bucketSizes))
	rs.next = 0
	for i, w := range j.workers {
		f, b := j.computeTime()
		w.compute += f + b
		w.stepCompute = f + b
		start := max(j.e.now, w.cpu.free)
		rs.bwdEnd[i] = start + f + b
		w.cpu.free = rs.bwdEnd[i]
		for k, at := range j.bucketReady {
			j.e.at(start+f+b*at, func() { j.ringReady(k) })
		}
	}
}

// ringReady counts one rank's bucket k as ready and reduces the buckets
// every rank has, in order.
func (j *job) ringReady(k int) {
	rs := j.ring
	rs.buckets[k].ready++
	rs.buckets[k].at = j.e.now
	j.ringReduce()
}

func (j *job) ringReduce() {
	rs := j.ring
	n := float64(j.cfg.Workers)
	for rs.next < len(rs.buckets) && rs.buckets[rs.next].ready == j.cfg.Workers {
		seg := j.bucketSizes[rs.next] / n
		round := j.cfg.Latency
		if j.net.bps > 0 {
			round += seg / j.net.bps
		}
		rounds := 2 * (n - 1)
		start := max(rs.commEnd, rs.buckets[rs.next].at)
		rs.commEnd = start + rounds*round
		for _, w := range j.workers {
			w.nic.sent += rounds * seg
			w.nic.received += rounds * seg
		}
		rs.next++
	}
	if rs.next < len(rs.buckets) {
		return
	}
	// Every bucket is on its way: once the last is reduced, each rank
	// applies the optimizer step, and the step ends with the slowest.
	apply := j.applyTime(float64(j.cfg.VectorBytes()))
	end := rs.commEnd
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
