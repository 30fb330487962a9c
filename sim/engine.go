package sim

// engine runs events in time order (seconds); events at the same time
// run in the order they were scheduled. Its queue is a binary heap of its
// own (container/heap's interface calls cost twice as much here, where a
// thousand workers make millions of events; a 4-ary heap, tried, cost 10%
// more CPU). The heap holds no pointers
// (each event's function waits in fns, under its slot), so moving events
// in it needs no write barriers and the collector does not scan it.
type engine struct {
	now  float64
	q    []event
	seq  int
	fns  []func() // by slot
	free []int32  // slots of fns not in use
}

type event struct {
	at   float64
	seq  int
	slot int32 // of fn in engine.fns
}

func (a *event) before(b *event) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.seq < b.seq
}

// at schedules fn at time t (not before now).
func (e *engine) at(t float64, fn func()) {
	e.seq++
	var slot int32
	if n := len(e.free); n > 0 {
		slot, e.free = e.free[n-1], e.free[:n-1]
		e.fns[slot] = fn
	} else {
		slot = int32(len(e.fns))
		e.fns = append(e.fns, fn)
	}
	e.q = append(e.q, event{at: max(t, e.now), seq: e.seq, slot: slot})
	for i := len(e.q) - 1; i > 0; {
		p := (i - 1) / 2
		if !e.q[i].before(&e.q[p]) {
			break
		}
		e.q[i], e.q[p] = e.q[p], e.q[i]
		i = p
	}
}

// pop removes and returns the earliest event.
func (e *engine) pop() event {
	q := e.q
	top := q[0]
	last := len(q) - 1
	q[0] = q[last]
	q[last] = event{}
	q = q[:last]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < len(q) && q[l].before(&q[m]) {
			m = l
		}
		if r := l + 1; r < len(q) && q[r].before(&q[m]) {
			m = r
		}
		if m == i {
			break
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
	e.q = q
	return top
}

// run runs events until none is left or limit of them ran; it reports
// whether the queue emptied.
func (e *engine) run(limit int) bool {
	for n := 0; len(e.q) > 0; n++ {
		if n == limit {
			return false
		}
		ev := e.pop()
		e.now = ev.at
		fn := e.fns[ev.slot]
		e.fns[ev.slot] = nil
		e.free = append(e.free, ev.slot)
		fn()
	}
	return true
}

// nic is one process's network interface: each direction carries one
// piece at a time. cores, when the network charges CPU per byte, is
// where the process spends it.
type nic struct {
	egress, ingress float64 // when each direction is next free
	sent, received  float64 // bytes
	cores           *cores
	// lines, when > 1, is how many NICs this one stands for (a class of
	// shards, Config.Pieces): it carries that many times the line rate.
	lines float64
	// pool, when set, is the NICs this one's host shares with a class of
	// colocated shards (Config.Colocated with Pieces): each piece through
	// this NIC also takes its time on the pool's line.
	pool *nic
}

// lineTime is how long k bytes take through n at bps per line (0:
// infinite).
func (n *nic) lineTime(k, bps float64) float64 {
	switch {
	case bps == 0:
		return 0
	case n.lines > 1:
		return k / (bps * n.lines)
	}
	return k / bps
}

// free is when the pool's egress (or ingress) is next free; 0 for no
// pool (a nil n).
func (n *nic) free(egress bool) float64 {
	switch {
	case n == nil:
		return 0
	case egress:
		return n.egress
	}
	return n.ingress
}

// book takes k bytes' time on the pool's egress (or ingress) from t; a
// nil n has nothing to book.
func (n *nic) book(egress bool, t, k, bps float64) {
	switch {
	case n == nil:
	case egress:
		n.egress = t + n.lineTime(k, bps)
	default:
		n.ingress = t + n.lineTime(k, bps)
	}
}

// network moves bytes between NICs.
type network struct {
	e       *engine
	bps     float64 // bytes per second per direction; 0: infinite
	latency float64 // one way, seconds
	piece   float64 // bytes
	burst   float64 // each direction's token bucket, in seconds of line time
	perByte float64 // CPU seconds per byte, at each end; 0: none
}

// cores are processors that take work first come first served, each
// piece of work on whichever is free first: the CPUs of a host that its
// processes share (or one process's own).
type cores struct{ free []float64 }

func newCores(n int) *cores { return &cores{free: make([]float64, n)} }

// take occupies the first free core for d seconds from now and returns
// when that ends.
func (c *cores) take(now, d float64) float64 {
	i := 0
	for k, f := range c.free {
		if f < c.free[i] {
			i = k
		}
	}
	c.free[i] = max(now, c.free[i]) + d
	return c.free[i]
}

// stream is one ordered flow of messages from a to b, as a gRPC stream
// is, in pieces. A piece leaves a's egress at the line rate as soon as
// the egress is free, and enters b's ingress at the line rate as soon as
// that is free (the switch between them buffers it); the stream sends
// its next piece once b has begun taking this one (a window of about a
// piece, as flow control keeps it). So the streams that share a NIC
// share it piece by piece, and neither side's queue holds up the other.
type stream struct {
	nw   *network
	a, b *nic // the lines the pieces pass
	// pa and pb are the processes at the ends, whose counts and cores the
	// pieces take: a and b, but for a shard that shares its host's NIC
	// (Config.Colocated). local: both ends on one host, the pieces cross
	// no line and take no latency.
	pa, pb *nic
	local  bool
	queue  []message
	busy   bool
	piece  float64 // bytes; the network's when 0
	wake   func()  // sends the next piece
}

type message struct {
	size, left float64 // bytes, and bytes not yet sent
	done       func()  // called when the last byte has arrived
	// prepared is when the sender's CPU began on it (CPU per byte): it
	// prepares the message on one core, in order, and each piece may
	// leave once prepared, while the next is prepared.
	prepared float64
}

func (nw *network) stream(a, b *nic) *stream {
	s := &stream{nw: nw, a: a, b: b, pa: a, pb: b}
	// One closure for the stream's every next piece, not one a piece: a
	// thousand workers' plans schedule millions of them.
	s.wake = func() {
		s.busy = false
		s.pump()
	}
	return s
}

// send queues a message of n bytes; done is called when it has arrived.
func (s *stream) send(n float64, done func()) {
	m := message{size: n, left: n, done: done}
	if pb := s.nw.perByte; pb > 0 {
		m.prepared = s.pa.cores.take(s.nw.e.now, n*pb) - n*pb
	}
	s.queue = append(s.queue, m)
	s.pump()
}

func (s *stream) pump() {
	if s.busy || len(s.queue) == 0 {
		return
	}
	nw, m := s.nw, &s.queue[0]
	piece := nw.piece
	if s.piece > 0 {
		piece = s.piece
	}
	k := min(m.left, piece)
	dOut, dIn := s.a.lineTime(k, nw.bps), s.b.lineTime(k, nw.bps)
	if ready := m.prepared + (m.size-m.left+k)*nw.perByte; ready > nw.e.now {
		// Not yet prepared (CPU per byte): its turn on the egress comes
		// once it is, so that the egress stays free to others till then.
		s.busy = true
		nw.e.at(ready, func() {
			s.busy = false
			s.pump()
		})
		return
	}
	// Each direction is a token bucket kept as the time its line has
	// carried everything booked on it (as internal/netshape's line): a
	// piece is booked from when the line is free, and passes once the
	// line's clock is within the bucket's depth of its end. A local
	// stream passes no line: its pieces arrive at once.
	latency, left, in, arrived := 0.0, nw.e.now, nw.e.now, nw.e.now
	if !s.local {
		latency = nw.latency
		out := max(nw.e.now, s.a.egress, s.a.pool.free(true))
		s.a.egress = out + dOut
		s.a.pool.book(true, out, k, nw.bps)
		left = max(nw.e.now, out+dOut-nw.burst)
		in = max(out, s.b.ingress, s.b.pool.free(false))
		s.b.ingress = in + dIn
		s.b.pool.book(false, in, k, nw.bps)
		arrived = max(left, in+dIn-nw.burst)
	}
	s.pa.sent += k
	s.pb.received += k
	m.left -= k
	last := m.left <= 0
	done := m.done
	if last {
		s.queue = s.queue[1:]
	}
	switch {
	case nw.perByte > 0: // the receiver's copy, once the piece is in
		nw.e.at(arrived+latency, func() {
			end := s.pb.cores.take(nw.e.now, k*nw.perByte)
			if last {
				nw.e.at(end, done)
			}
		})
	case last:
		nw.e.at(arrived+latency, done)
	}
	s.busy = true
	nw.e.at(max(left, in-nw.burst), s.wake)
}

// cpu is a processor that does one thing at a time, first come first
// served.
type cpu struct{ free float64 }

// run occupies c for d seconds from now (or when c is next free) and
// calls done at the end.
func (c *cpu) run(e *engine, d float64, done func()) {
	c.free = max(e.now, c.free) + d
	e.at(c.free, done)
}
