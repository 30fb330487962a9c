package sim

import "github.com/shoalml/shoal/consistency"

// simShard is one parameter-server shard.
type simShard struct {
	id     int
	nic    nic
	cpu    cpu
	chunks []float64 // bytes of each owned chunk (of all count shards)
	bytes  float64   // their sum
	count  int       // shards it stands for (Config.Pieces), each its own core
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
	back, want int  // chunks received of the reply under way, and expected
	pulling    bool // the reply is the first pull, before step 0
	// Shards that took the push, and how many must before the step ends:
	// every shard on the last step (no reply comes) and with Overlap
	// (the reply is a pull of its own); none otherwise.
	acks, wantAcks int
	// inflight: a fragment exchange's reply is still coming while the
	// worker computes on (Config.FragmentOverlap); it is needed before
	// step mergeAt, and blocked says the worker waits for it there.
	inflight, blocked bool
	mergeAt           int
	// step is the worker's step the push under way is of (the worker
	// may be past it while an overlapped exchange is in flight).
	step int
}

// progress ends w's step (or its first pull) once the reply and the
// acknowledgements it waits for are in, and starts the next; an
// overlapped exchange's reply only lets a worker waiting for it go on.
func (j *job) progress(w *simWorker) {
	pw := &j.ps[w.id]
	if pw.back < pw.want || pw.acks < pw.wantAcks {
		return
	}
	if pw.inflight {
		pw.inflight = false
		if pw.blocked {
			pw.blocked = false
			j.psStep(w)
		}
		return
	}
	if pw.pulling {
		pw.pulling = false
	} else {
		j.stepDone(w)
	}
	j.psStep(w)
}

func (j *job) startPS() error {
	classes, err := j.cfg.classes()
	if err != nil {
		return err
	}
	n := j.cfg.Workers
	j.shards = make([]*simShard, len(classes))
	for i, cl := range classes {
		s := &simShard{id: i, nic: nic{cores: j.cores(), lines: float64(cl.count)}, chunks: cl.chunks, count: cl.count, progress: make([]int64, n), atSlowest: n,
			left: make([]int, n), seen: make([]int64, n), up: make([]*stream, n), down: make([]*stream, n)}
		for _, c := range cl.chunks {
			s.bytes += c
		}
		// Where its pieces pass: its own NIC; colocated, its host's (one
		// shard), or a pool its hosts' workers share (a class).
		line, home := &s.nic, -1
		if j.cfg.Colocated {
			if cl.count == 1 {
				home = host(cl.members[0], j.cfg.Servers, n)
				line = &j.workers[home].nic
			} else {
				for _, m := range cl.members {
					j.workers[host(m, j.cfg.Servers, n)].nic.pool = &s.nic
				}
			}
		}
		for w, wk := range j.workers {
			up, down := j.net.stream(&wk.nic, line), j.net.stream(line, &wk.nic)
			up.pb, down.pa = &s.nic, &s.nic
			up.local, down.local = w == home, w == home
			up.piece, down.piece = cl.piece, cl.piece
			s.up[w], s.down[w] = up, down
		}
		j.shards[i] = s
	}
	j.ps = make([]psWorker, n)
	for _, w := range j.workers {
		// A worker starts with a pull of the whole vector, as shoal
		// worker does: its request takes the latency, every shard answers.
		pw := &j.ps[w.id]
		pw.pulling = true
		w.end = j.start(w.id)
		j.e.at(w.end, func() { j.trace(j.shards[0], Op{Worker: w.id, Step: 0, Read: true}) })
		for _, s := range j.shards {
			pw.want += len(s.chunks)
			j.e.at(w.end+j.cfg.Latency, func() { j.replyWhole(s, w) })
		}
	}
	return nil
}

// psStep computes w's next step and pushes it, or ends w.
func (j *job) psStep(w *simWorker) {
	if w.step == j.cfg.Steps {
		return
	}
	if pw := &j.ps[w.id]; pw.inflight && (w.step >= pw.mergeAt || j.lastStep(w)) {
		// The overlapped exchange's fragment is merged before this step.
		pw.blocked = true
		return
	}
	f, b := j.computeTime()
	w.cpu.run(j.e, f+b, func() {
		w.compute += f + b
		w.stepCompute = f + b
		if j.localStep(w) {
			// Within a round: the next step computes at once.
			j.stepDone(w)
			j.psStep(w)
			return
		}
		j.push(w)
	})
}

// localStep says whether w's current step ends inside a round of local
// steps (Config.LocalSteps), with nothing to push.
func (j *job) localStep(w *simWorker) bool {
	p := j.stepsPerExchange()
	return p > 1 && (w.step+1)%p != 0 && !j.lastStep(w)
}

// stepsPerExchange is how many steps a worker takes per exchange: 1, or
// LocalSteps, or with fragments LocalSteps/Fragments.
func (j *job) stepsPerExchange() int { return max(j.cfg.LocalSteps/max(j.cfg.Fragments, 1), 1) }

// fragment is the share of each shard's chunks an exchange carries: 1,
// or 1/Fragments.
func (j *job) fragment() float64 {
	if j.cfg.LocalSteps > 1 && j.cfg.Fragments > 1 {
		return 1 / float64(j.cfg.Fragments)
	}
	return 1
}

// lastStep says whether w is on its last step, whose push fetches no
// weights: the shards only acknowledge it.
func (j *job) lastStep(w *simWorker) bool { return w.step == j.cfg.Steps-1 }

// push sends w's gradient for its current step to every shard, chunk by
// chunk; with Overlap, the pull of the next step's weights goes at the
// same time.
func (j *job) push(w *simWorker) {
	pw := &j.ps[w.id]
	last := j.lastStep(w)
	*pw = psWorker{step: w.step}
	if tau := j.cfg.FragmentOverlap; tau > 0 && !last && j.cfg.LocalSteps > 1 {
		// The worker computes on while the exchange is in flight; its
		// reply is needed before step step+1+τ (psStep waits there).
		defer func() {
			pw.inflight, pw.mergeAt = true, w.step+1+tau
			j.stepDone(w)
			j.psStep(w)
		}()
	}
	if last || j.cfg.Overlap {
		pw.wantAcks = len(j.shards)
	}
	for _, s := range j.shards {
		if !last {
			pw.want += len(s.chunks)
		}
		s.left[w.id] = len(s.chunks)
		for _, c := range s.chunks {
			s.up[w.id].send(c*j.fragment(), func() { j.arrive(s, w) })
		}
		if j.cfg.Overlap && !last {
			// The pull's request takes the latency; the shard answers with
			// the weights it has then, this push applied or not.
			j.e.at(j.e.now+j.cfg.Latency, func() {
				s.seen[w.id] = s.clock
				j.trace(s, Op{Worker: w.id, Step: int64(w.step) + 1, Read: true})
				j.replyAll(s, w)
			})
		}
	}
}

// ack tells w, a latency later, that a shard took its push (on its last
// step, and with Overlap, where no reply to the push comes).
func (j *job) ack(w *simWorker) {
	j.e.at(j.e.now+j.cfg.Latency, func() {
		j.ps[w.id].acks++
		j.progress(w)
	})
}

// arrive handles one chunk of w's push at shard s. A shard takes a push
// whole, as ps.Server does (it checks every value before it applies
// any); then, in async and SSP, it updates chunk after chunk, and async
// sends each updated chunk straight back.
func (j *job) arrive(s *simShard, w *simWorker) {
	if s.left[w.id]--; s.left[w.id] > 0 {
		return
	}
	if j.cfg.Mode == consistency.Sync {
		// The barrier sums the push in; the step's update comes once.
		j.syncPushed(s, w)
		return
	}
	last := j.ps[w.id].step == j.cfg.Steps-1
	replies := j.cfg.Mode == consistency.Async && !last && !j.cfg.Overlap
	for i, bytes := range s.chunks {
		bytes *= j.fragment()
		s.cpu.run(j.e, j.applyTime(bytes/float64(s.count)), func() {
			if i == 0 && s.id == 0 {
				// The shard's updates since w read (its pushes apply whole,
				// one after another).
				j.stale.Add(s.clock - s.seen[w.id])
			}
			if i < len(s.chunks)-1 {
				if replies {
					j.reply(s, w, bytes)
				}
				return
			}
			j.applied(s, w, bytes, last || j.cfg.Overlap)
		})
	}
}

// applied ends the update of w's push at s (async, SSP): the clock moves,
// and the reply goes (async: its last chunk; SSP: all of it, once the
// bound lets it), or, where none is wanted, the acknowledgement.
func (j *job) applied(s *simShard, w *simWorker, bytes float64, noReply bool) {
	s.clock++
	moved := s.advance(w.id, int64(w.step)+1)
	j.trace(s, Op{Worker: w.id, Step: int64(w.step)})
	switch {
	case noReply:
		j.ack(w)
	case j.cfg.Mode == consistency.Async:
		j.trace(s, Op{Worker: w.id, Step: int64(w.step) + 1, Read: true})
		s.seen[w.id] = s.clock
		j.reply(s, w, bytes)
	default:
		if h := (heldReply{w, int64(w.step) + 1}); !j.mayRead(s, h) {
			s.held = append(s.held, h)
		} else {
			s.seen[w.id] = s.clock
			j.trace(s, Op{Worker: w.id, Step: h.step, Read: true})
			j.replyAll(s, w)
		}
	}
	if moved {
		j.releaseSSP(s)
	}
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
	last := j.ps[w.id].step == j.cfg.Steps-1
	if last {
		// The last push is acknowledged at once; it waits for no reply.
		j.ack(w)
	}
	if int64(j.ps[w.id].step/j.stepsPerExchange()) < s.clock {
		if last {
			return
		}
		// Late: dropped, the next step's weights are there.
		j.trace(s, Op{Worker: w.id, Step: int64(w.step) + 1, Read: true})
		j.replyAll(s, w)
		return
	}
	s.arrived++
	if !last {
		s.waiting = append(s.waiting, w)
	}
	if s.arrived < j.cfg.Workers-j.cfg.BackupWorkers {
		return
	}
	apply := j.applyTime(s.bytes * j.fragment() / float64(s.count))
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

// replyAll sends every chunk of s to w: of the exchange's fragment
// (Config.Fragments), or whole.
func (j *job) replyAll(s *simShard, w *simWorker) {
	for _, c := range s.chunks {
		j.reply(s, w, c*j.fragment())
	}
}

// replyWhole sends every chunk of s to w whole (the first pull).
func (j *job) replyWhole(s *simShard, w *simWorker) {
	for _, c := range s.chunks {
		j.reply(s, w, c)
	}
}

// reply sends one chunk of weights from s to w; the last chunk of the
// reply ends w's step (or its first pull) and starts the next.
func (j *job) reply(s *simShard, w *simWorker, bytes float64) {
	s.down[w.id].send(bytes, func() {
		j.ps[w.id].back++
		j.progress(w)
	})
}
