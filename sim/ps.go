package sim

import "github.com/shoalml/shoal/consistency"

// simShard is one parameter-server shard.
type simShard struct {
	id     int
	nic    nic
	cpu    cpu
	chunks []float64 // bytes of each owned chunk
	bytes  float64   // their sum
	clock  int64     // updates applied
	// Sync: the step being collected, who pushed it, who waits for its
	// weights.
	arrived int
	waiting []*simWorker
	// SSP: steps each worker pushed whole, the least of them and how many
	// workers are there; replies held by the bound.
	progress  []int64
	slowest   int64
	atSlowest int
	held      []heldReply
	// Per worker: chunks of its push still to apply or arrive, the clock
	// its last read saw (staleness), and the streams to and from it.
	left     []int
	seen     []int64
	up, down []*stream
}

type heldReply struct {
	w    *simWorker
	step int64 // the step the worker will compute with the weights
}

// psWorker is a worker's progress through its push-pull.
type psWorker struct {
	back, want int // chunks received of this step's reply, and expected
}

func (j *job) startPS() error {
	plan, err := j.cfg.plan()
	if err != nil {
		return err
	}
	n := j.cfg.Workers
	j.shards = make([]*simShard, len(plan))
	for i, chunks := range plan {
		s := &simShard{id: i, chunks: chunks, progress: make([]int64, n), atSlowest: n, left: make([]int, n), seen: make([]int64, n),
			up: make([]*stream, n), down: make([]*stream, n)}
		for _, c := range chunks {
			s.bytes += c
		}
		for w, wk := range j.workers {
			s.up[w], s.down[w] = j.net.stream(&wk.nic, &s.nic), j.net.stream(&s.nic, &wk.nic)
		}
		j.shards[i] = s
	}
	j.ps = make([]psWorker, n)
	for _, w := range j.workers {
		j.trace(j.shards[0], Op{Worker: w.id, Step: 0, Read: true})
		j.e.at(0, func() { j.psStep(w) })
	}
	return nil
}

// psStep computes w's next step and pushes it, or ends w.
func (j *job) psStep(w *simWorker) {
	if w.step == j.cfg.Steps {
		w.end = j.e.now
		return
	}
	f, b := j.computeTime()
	w.cpu.run(j.e, f+b, func() {
		w.compute += f + b
		j.push(w)
	})
}

// push sends w's gradient for its current step to every shard, chunk by
// chunk.
func (j *job) push(w *simWorker) {
	pw := &j.ps[w.id]
	pw.back, pw.want = 0, 0
	for _, s := range j.shards {
		pw.want += len(s.chunks)
		s.left[w.id] = len(s.chunks)
		for _, c := range s.chunks {
			s.up[w.id].send(c, func() { j.arrive(s, w, c) })
		}
	}
}

// arrive handles one chunk of w's push at shard s.
func (j *job) arrive(s *simShard, w *simWorker, bytes float64) {
	apply := 0.0
	if r := j.cfg.ApplyBytesPerSec; r > 0 {
		apply = bytes / r
	}
	if j.cfg.Mode == consistency.Sync {
		// The barrier sums the chunk in; the step's update comes once.
		if s.left[w.id]--; s.left[w.id] == 0 {
			j.syncPushed(s, w)
		}
		return
	}
	first := s.left[w.id] == len(s.chunks)
	s.cpu.run(j.e, apply, func() {
		if first && s.id == 0 {
			j.stale.Add(s.clock - s.seen[w.id])
		}
		moved := false
		if s.left[w.id]--; s.left[w.id] == 0 {
			s.clock++
			moved = s.advance(w.id, int64(w.step)+1)
			j.trace(s, Op{Worker: w.id, Step: int64(w.step)})
			if j.cfg.Mode == consistency.Async {
				j.trace(s, Op{Worker: w.id, Step: int64(w.step) + 1, Read: true})
			}
		}
		if j.cfg.Mode == consistency.Async {
			// The updated chunk goes straight back.
			s.seen[w.id] = s.clock
			j.reply(s, w, bytes)
			return
		}
		if s.left[w.id] != 0 {
			return
		}
		if h := (heldReply{w, int64(w.step) + 1}); !j.mayRead(s, h) {
			s.held = append(s.held, h)
		} else {
			s.seen[w.id] = s.clock
			j.trace(s, Op{Worker: w.id, Step: h.step, Read: true})
			j.replyAll(s, w)
		}
		if moved {
			j.releaseSSP(s)
		}
	})
}

// advance records that worker w has pushed p steps, keeping the slowest
// progress up to date (amortised O(1) a push); it reports whether the
// slowest moved.
func (s *simShard) advance(w int, p int64) bool {
	was := s.progress[w]
	s.progress[w] = p
	if was != s.slowest {
		return false
	}
	if s.atSlowest--; s.atSlowest > 0 {
		return false
	}
	s.slowest = p
	for _, q := range s.progress {
		s.slowest = min(s.slowest, q)
	}
	for _, q := range s.progress {
		if q == s.slowest {
			s.atSlowest++
		}
	}
	return true
}

// mayRead says whether the staleness bound lets h through: a worker may
// read for step t once the slowest worker pushed t−s steps (after its
// last step it reads nothing).
func (j *job) mayRead(s *simShard, h heldReply) bool {
	return h.step-s.slowest <= j.cfg.Staleness || h.step >= int64(j.cfg.Steps)
}

// releaseSSP sends every held reply the bound now lets through.
func (j *job) releaseSSP(s *simShard) {
	keep := s.held[:0]
	for _, h := range s.held {
		if j.mayRead(s, h) {
			s.seen[h.w.id] = s.clock
			j.trace(s, Op{Worker: h.w.id, Step: h.step, Read: true})
			j.replyAll(s, h.w)
		} else {
			keep = append(keep, h)
		}
	}
	s.held = keep
}

// syncPushed counts w's whole push at s: the step is applied once the
// workers less the backup workers pushed it; a later push is dropped and
// answered at once.
func (j *job) syncPushed(s *simShard, w *simWorker) {
	j.trace(s, Op{Worker: w.id, Step: int64(w.step)})
	if int64(w.step) < s.clock {
		// Late: dropped, the next step's weights are there.
		j.trace(s, Op{Worker: w.id, Step: int64(w.step) + 1, Read: true})
		j.replyAll(s, w)
		return
	}
	s.arrived++
	s.waiting = append(s.waiting, w)
	if s.arrived < j.cfg.Workers-j.cfg.BackupWorkers {
		return
	}
	apply := 0.0
	if r := j.cfg.ApplyBytesPerSec; r > 0 {
		apply = s.bytes / r
	}
	waiting := s.waiting
	s.arrived, s.waiting = 0, nil
	s.clock++ // pushes for this step from now on are late
	s.cpu.run(j.e, apply, func() {
		for _, v := range waiting {
			j.trace(s, Op{Worker: v.id, Step: int64(v.step) + 1, Read: true})
			j.replyAll(s, v)
		}
	})
}

// replyAll sends every chunk of s to w.
func (j *job) replyAll(s *simShard, w *simWorker) {
	for _, c := range s.chunks {
		j.reply(s, w, c)
	}
}

// reply sends one chunk of weights from s to w; the last chunk of the
// step's reply ends w's step.
func (j *job) reply(s *simShard, w *simWorker, bytes float64) {
	s.down[w.id].send(bytes, func() {
		pw := &j.ps[w.id]
		if pw.back++; pw.back == pw.want {
			w.step++
			j.psStep(w)
		}
	})
}
