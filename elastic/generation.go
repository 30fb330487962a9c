package elastic

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"slices"
	"time"

	"github.com/shoalml/shoal/collective"
	"github.com/shoalml/shoal/data"
	pb "github.com/shoalml/shoal/proto/shoalpb"
	"github.com/shoalml/shoal/worker"
)

// generation connects this member to generation resp's ring, takes up the
// root's state and trains until the end (nil and the outcome) or until
// the ring breaks or is interrupted.
func (m *member) generation(ctx context.Context, resp *pb.ReformResponse, lis net.Listener, prev []int, reason string) (*Outcome, error) {
	members := toInts(resp.Members)
	rank := slices.Index(members, m.cfg.Member)
	size := len(members)
	// A member that membership declares dead ends the generation at once:
	// a peer whose host vanished sends no reset, and a collective would
	// otherwise wait out its whole call timeout for it.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go m.watch(ctx, members, cancel)
	tr, err := m.cfg.Connect(ctx, rank, size, resp.Master, lis, fmt.Sprintf("%s#%d", m.cfg.JobID, resp.Generation))
	if err != nil {
		return nil, &connectError{fmt.Errorf("connecting generation %d (%d members): %w", resp.Generation, size, withCause(ctx, err))}
	}
	closeOnErr := func(err error) (*Outcome, error) {
		tr.Close()
		return nil, withCause(ctx, err)
	}
	comm, err := collective.New(tr, m.cfg.Comm)
	if err != nil {
		return closeOnErr(err)
	}
	rc := m.cfg.Ring
	rc.Initial, rc.Synced, rc.Interrupt = nil, true, m.cfg.Coordinator.Pending
	ring, err := worker.NewRing(comm, len(m.params), rc)
	if err != nil {
		return closeOnErr(err)
	}
	// The ring's optimizer starts from this member's own state, which the
	// root sends to every rank (a fresh one would reset momentum and the
	// schedule's step at every re-form).
	if m.opt != nil {
		if err := ring.Restore(*m.opt); err != nil {
			return closeOnErr(fmt.Errorf("restoring this member's optimizer state: %w", err))
		}
	}
	if err := m.sync(ctx, comm, ring, int(resp.Root)); err != nil {
		return closeOnErr(fmt.Errorf("taking up rank %d's state: %w", resp.Root, err))
	}
	m.synced, m.members = resp.Generation, resp.Members
	g := Generation{Number: resp.Generation, Members: members, Rank: rank, Step: m.pos.step, Reason: reason, LR: ring.LR()}
	for _, id := range prev {
		if !slices.Contains(members, id) {
			g.Left = append(g.Left, id)
		}
	}
	for _, id := range members {
		if !slices.Contains(prev, id) {
			g.Joined = append(g.Joined, id)
		}
	}
	m.log.Info("generation", "number", g.Number, "members", members, "rank", rank, "step", g.Step, "left", g.Left, "joined", g.Joined)
	if m.cfg.OnGeneration != nil {
		m.cfg.OnGeneration(g)
	}
	if m.start.IsZero() {
		m.start = time.Now()
	}
	err = m.train(ctx, rank, size, ring)
	// The state that goes with the weights as training left them: a step
	// that failed before its update changed neither.
	st := ring.State()
	m.opt = &st
	if err != nil {
		return closeOnErr(err)
	}
	return &Outcome{Steps: m.pos.step, Samples: m.samples, Last: m.last, Rank: rank, Size: size, Comm: comm, Ring: ring, Params: m.params, transport: tr}, nil
}

// withCause prefixes err with why ctx ended, when it ended for a reason
// err does not already hold (a member lost): it says why the generation
// ended.
func withCause(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) {
		return fmt.Errorf("%v: %w", cause, err)
	}
	return err
}

// errMemberLost is the cause of a generation ended because membership
// declared one of its members dead.
type errMemberLost struct{ id int }

func (e errMemberLost) Error() string {
	return fmt.Sprintf("member %d is no longer alive, as membership sees it", e.id)
}

// watch cancels the generation of members when one of them, once seen
// alive, leaves the roster, until ctx ends. (A member this one's gossip
// has not seen yet is not judged: gossip may still be spreading.)
func (m *member) watch(ctx context.Context, members []int, cancel context.CancelCauseFunc) {
	seen := map[int]bool{}
	for {
		changed := m.cfg.Coordinator.changes()
		live := m.cfg.Roster.Live()
		for _, id := range members {
			alive := slices.ContainsFunc(live, func(l Member) bool { return l.ID == id })
			if seen[id] && !alive {
				cancel(errMemberLost{id})
				return
			}
			seen[id] = seen[id] || alive
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return
		}
	}
}

// sync makes every rank hold the root's weights, optimizer state and data
// position. Integers travel as the bits of float32s (a broadcast moves
// them unchanged). A rank takes none of it unless all of it arrived and
// checked out: a root that dies part-way leaves it with its own state
// whole, not the root's weights in part of its own.
func (m *member) sync(ctx context.Context, comm *collective.Communicator, ring *worker.Ring, root int) error {
	var head [10]float32
	st := ring.State()
	if comm.Rank() == root {
		putInt64(head[0:], m.pos.step)
		putInt64(head[2:], int64(m.pos.epoch))
		putInt64(head[4:], int64(len(m.pos.rest)))
		putInt64(head[6:], st.Steps)
		putInt64(head[8:], m.pos.inEpoch)
	}
	if err := comm.Broadcast(ctx, head[:], root); err != nil {
		return err
	}
	step, epoch, nrest, optSteps, inEpoch := getInt64(head[0:]), getInt64(head[2:]), getInt64(head[4:]), getInt64(head[6:]), getInt64(head[8:])
	if step < 0 || epoch < 0 || nrest < 0 || nrest > int64(m.cfg.Train.Len()) || optSteps < 0 || inEpoch < 0 || inEpoch > step {
		return fmt.Errorf("the root sent a position out of range (step %d, epoch %d, %d samples left, optimizer step %d, %d steps into the epoch)",
			step, epoch, nrest, optSteps, inEpoch)
	}
	rest := make([]float32, nrest)
	if comm.Rank() == root {
		for i, v := range m.pos.rest {
			rest[i] = math.Float32frombits(uint32(v))
		}
	}
	if err := comm.Broadcast(ctx, rest, root); err != nil {
		return err
	}
	params := m.params
	if comm.Rank() != root {
		params = make([]float32, len(m.params))
	}
	if err := comm.Broadcast(ctx, params, root); err != nil {
		return err
	}
	for i, v := range params {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return fmt.Errorf("the root sent weight %d = %v: want finite", i, v)
		}
	}
	// st's slots are copies (ring.State): the ring keeps its own until
	// Restore.
	for _, name := range slices.Sorted(maps.Keys(st.Slots)) {
		if err := comm.Broadcast(ctx, st.Slots[name], root); err != nil {
			return err
		}
	}
	if comm.Rank() == root {
		return nil
	}
	pos := position{step: step, epoch: int(epoch), inEpoch: inEpoch}
	if nrest > 0 {
		pos.rest = make([]int, nrest)
		for i, f := range rest {
			v := int(math.Float32bits(f))
			if v >= m.cfg.Train.Len() {
				return fmt.Errorf("the root sent sample %d of a dataset of %d", v, m.cfg.Train.Len())
			}
			pos.rest[i] = v
		}
	}
	st.Steps = optSteps
	if err := ring.Restore(st); err != nil {
		return err
	}
	copy(m.params, params)
	m.pos = pos
	return nil
}

func putInt64(dst []float32, v int64) {
	dst[0] = math.Float32frombits(uint32(uint64(v)))
	dst[1] = math.Float32frombits(uint32(uint64(v) >> 32))
}

func getInt64(src []float32) int64 {
	return int64(uint64(math.Float32bits(src[0])) | uint64(math.Float32bits(src[1]))<<32)
}

// done says whether training is over.
func (m *member) done() bool {
	if s := m.cfg.Worker.Steps; s > 0 {
		return m.pos.step >= s
	}
	return m.pos.epoch >= m.cfg.Worker.Epochs
}

// epochs is the number of epochs the run spans, for progress reports.
func (m *member) epochs(size int) int {
	if s := m.cfg.Worker.Steps; s > 0 {
		per := int64(m.stepsIn(m.cfg.Train.Len(), size))
		return int((s + per - 1) / per)
	}
	return m.cfg.Worker.Epochs
}

// stepsIn is the steps each of size ranks takes over n samples.
func (m *member) stepsIn(n, size int) int {
	perRank := (n + size - 1) / size
	return (perRank + m.per - 1) / m.per
}

// train runs this generation: one worker per epoch, or per rest of an
// epoch, over the shared parameter vector. After each (also one that
// fails) the position says what is done.
func (m *member) train(ctx context.Context, rank, size int, ring *worker.Ring) error {
	epochs := m.epochs(size)
	for !m.done() {
		ds, seed := m.cfg.Train, m.cfg.Worker.Seed+uint64(m.pos.epoch)
		if m.pos.rest != nil {
			var err error
			if ds, err = data.Subset(m.cfg.Train, m.pos.rest); err != nil {
				return err
			}
		}
		wc := m.cfg.Worker
		wc.Rank, wc.WorldSize, wc.Epochs, wc.Seed, wc.Params, wc.StartStep, wc.Eval = rank, size, 1, seed, m.params, 0, nil
		wc.Steps = int64(m.stepsIn(ds.Len(), size))
		if s := m.cfg.Worker.Steps; s > 0 {
			wc.Steps = min(wc.Steps, s-m.pos.step)
		}
		base, epoch, before := m.pos.step, m.pos.epoch, int(m.pos.inEpoch)
		if on := m.cfg.Worker.OnStep; on != nil {
			wc.OnStep = func(step int64, t worker.StepTimes) { on(base+step, t) }
		}
		// Progress counts the epoch's steps, those of earlier generations
		// too.
		relabel := func(pr worker.Progress) worker.Progress {
			pr.Rank, pr.Epoch, pr.Epochs = m.cfg.Member, epoch, epochs
			pr.Step, pr.EpochSteps = pr.Step+before, pr.EpochSteps+before
			return pr
		}
		if p := m.cfg.Worker.Progress; p != nil {
			wc.Progress = func(pr worker.Progress) { p(relabel(pr)) }
		}
		w, err := worker.New(wc, m.cfg.Model, ds, ring)
		if err != nil {
			return err
		}
		t0 := time.Now()
		res, err := w.Run(ctx)
		w.Close()
		m.advance(ds, seed, res.Steps, size)
		m.samples += res.Samples
		if err != nil {
			return err
		}
		if res.Steps == 0 && m.pos.epoch == epoch && !m.done() {
			// Never loop without progress.
			return fmt.Errorf("epoch %d: a worker over %d samples took no step", epoch, ds.Len())
		}
		m.last = relabel(res.Last)
		m.log.Debug("segment done", "epoch", epoch, "steps", res.Steps, "seconds", time.Since(t0).Seconds())
	}
	return nil
}

// advance moves the position past steps steps of size ranks over ds
// (seeded seed, as a one-epoch worker draws it).
func (m *member) advance(ds data.Dataset, seed uint64, steps int64, size int) {
	m.pos.step += steps
	m.pos.inEpoch += steps
	left := data.Remaining(ds.Len(), seed, 0, steps, m.per, size)
	if left == nil {
		m.pos.epoch++
		m.pos.rest, m.pos.inEpoch = nil, 0
		return
	}
	if m.pos.rest != nil { // ds is a subset: map its indices back
		for i, k := range left {
			left[i] = m.pos.rest[k]
		}
	}
	m.pos.rest = left
}
