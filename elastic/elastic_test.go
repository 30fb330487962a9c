package elastic

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/shoalml/shoal/collective"
	"github.com/shoalml/shoal/data"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
	pb "github.com/shoalml/shoal/proto/shoalpb"
	"github.com/shoalml/shoal/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// roster is an in-memory Roster: the test says who is alive, and tells
// the coordinators.
type roster struct {
	mu    sync.Mutex
	live  []Member
	coord []*Coordinator
}

func (r *roster) Live() []Member {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.live)
}

func (r *roster) set(ids ...int) {
	r.mu.Lock()
	r.live = r.live[:0]
	for _, id := range ids {
		r.live = append(r.live, Member{ID: id, Addr: fmt.Sprint("member-", id)})
	}
	coords := slices.Clone(r.coord)
	r.mu.Unlock()
	for _, c := range coords {
		c.RosterChanged()
	}
}

// hub hands out in-memory transports: one group per generation.
type hub struct {
	mu     sync.Mutex
	groups map[string][]collective.Transport
}

func (h *hub) connect(_ context.Context, rank, size int, _ string, lis net.Listener, job string) (collective.Transport, error) {
	if lis != nil {
		lis.Close()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	g := h.groups[job]
	if g == nil {
		g = collective.NewMemGroup(size)
		h.groups[job] = g
	}
	if len(g) != size {
		return nil, fmt.Errorf("generation %s has %d ranks, asked for %d", job, len(g), size)
	}
	return g[rank], nil
}

type fakeListener struct{}

func (l fakeListener) Accept() (net.Conn, error) { return nil, net.ErrClosed }
func (l fakeListener) Close() error              { return nil }
func (l fakeListener) Addr() net.Addr            { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }

// job is an in-process elastic job over a small MLP and synthetic data.
type job struct {
	t      *testing.T
	roster *roster
	hub    *hub
	coords map[string]*Coordinator
	train  data.Dataset
	spec   nn.Spec
	min    int
	rejoin time.Duration
	steps  int64
	epochs int
}

func newJob(t *testing.T, initial int) *job {
	train, _, err := data.Synthetic(data.SyntheticConfig{Train: 600, Test: 10, C: 1, H: 4, W: 4, Classes: 3, Seed: 3, Noise: 0.5})
	require.NoError(t, err)
	return &job{t: t, roster: &roster{}, hub: &hub{groups: map[string][]collective.Transport{}}, coords: map[string]*Coordinator{}, train: train,
		spec: nn.Spec{Arch: "mlp", Hidden: []int{8}, Channels: 1, Height: 4, Width: 4, Classes: 3}, min: 1, rejoin: time.Minute, epochs: 2, steps: 0}
}

// member returns member id's config and coordinator; initial is the first
// generation's size.
func (j *job) member(id, initial int) Config {
	model, err := nn.New(j.spec, nn.NewCPU())
	require.NoError(j.t, err)
	coord, err := NewCoordinator(CoordinatorConfig{JobID: "test", Self: id, Initial: initial, MinWorkers: j.min, RejoinTimeout: j.rejoin, Roster: j.roster,
		Listen: func() (net.Listener, error) { return fakeListener{}, nil }})
	require.NoError(j.t, err)
	j.roster.mu.Lock()
	j.roster.coord = append(j.roster.coord, coord)
	j.coords[fmt.Sprint("member-", id)] = coord
	j.roster.mu.Unlock()
	initialW := make([]float32, model.Layout().Size())
	model.Init(initialW, 5)
	ocfg := optim.DefaultConfig()
	ocfg.Algorithm, ocfg.LR, ocfg.Momentum = optim.Momentum, 0.05, 0.9
	return Config{
		Member: id, JobID: "test", Coordinator: coord, Roster: j.roster, Connect: j.hub.connect, Comm: collective.DefaultConfig(),
		Model: model, Train: j.train, Initial: initialW,
		Ring:          worker.RingConfig{Optimizer: ocfg, DesyncEvery: 5},
		Worker:        worker.Config{Batch: 10, Epochs: j.epochs, Steps: j.steps, Seed: 9},
		ReformTimeout: time.Minute,
		Ask: func(ctx context.Context, addr string, req *pb.ReformRequest) (*pb.ReformResponse, error) {
			j.roster.mu.Lock()
			c := j.coords[addr]
			j.roster.mu.Unlock()
			if c == nil {
				return nil, status.Errorf(codes.Unavailable, "no member at %s", addr)
			}
			return c.Reform(ctx, req)
		},
	}
}

type outcome struct {
	out *Outcome
	err error
}

// run starts cfg's member; its outcome arrives on the returned channel,
// its transport already closed.
func run(ctx context.Context, cfg Config) <-chan outcome {
	ch := make(chan outcome, 1)
	go func() {
		out, err := Run(ctx, cfg)
		if out != nil {
			out.Close()
		}
		ch <- outcome{out, err}
	}()
	return ch
}

// A member that dies after step 6 leaves two that re-form, share the rest
// of the epoch, and finish with the same weights. When the dead one is
// member 0, the coordinator and root, member 1 takes over both. With the
// linear scaling rule, the survivors' learning rate is the base times the
// live world size, 2, no longer the launch's 3.
func TestSurvivorsReformAndFinish(t *testing.T) {
	for _, tc := range []struct {
		victim  int
		scaleLR bool
	}{{2, false}, {0, false}, {2, true}} {
		victim := tc.victim
		t.Run(fmt.Sprint("member ", victim, " dies, scale lr ", tc.scaleLR), func(t *testing.T) {
			j := newJob(t, 3)
			j.roster.set(0, 1, 2)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cfgs := []Config{j.member(0, 3), j.member(1, 3), j.member(2, 3)}
			for id := range cfgs {
				cfgs[id].Ring.ScaleLR = tc.scaleLR
			}
			kctx, kill := context.WithCancel(ctx)
			// The victim dies only once the survivors have finished step 5
			// too: a ring member can finish a step before the others have
			// its last chunk, and dying then would leave them at step 5.
			survived := make(chan struct{}, 2)
			cfgs[victim].Worker.OnStep = func(step int64, _ worker.StepTimes) {
				if step == 5 { // after its 6th step
					for range 2 {
						select {
						case <-survived:
						case <-ctx.Done():
						}
					}
					kill()
				}
			}
			survivors := slices.DeleteFunc([]int{0, 1, 2}, func(id int) bool { return id == victim })
			gens := make([][]Generation, 3)
			runs := make([]<-chan outcome, 3)
			for _, id := range survivors {
				cfgs[id].OnGeneration = func(g Generation) { gens[id] = append(gens[id], g) }
				cfgs[id].Worker.OnStep = func(step int64, _ worker.StepTimes) {
					if step == 5 {
						survived <- struct{}{}
					}
				}
				runs[id] = run(ctx, cfgs[id])
			}
			dead := run(kctx, cfgs[victim])
			d := <-dead
			require.ErrorIs(t, d.err, context.Canceled)
			j.roster.set(survivors...) // gossip declares the victim dead
			ra, rb := <-runs[survivors[0]], <-runs[survivors[1]]
			require.NoError(t, ra.err)
			require.NoError(t, rb.err)
			// 6 steps of 3 ranks × 10 samples, then the 420 left of the
			// epoch over 2 ranks (21 steps), then a whole epoch of 2 (30).
			assert.Equal(t, int64(6+21+30), ra.out.Steps)
			assert.Equal(t, ra.out.Steps, rb.out.Steps)
			assert.Equal(t, 2, ra.out.Generations)
			assert.Equal(t, ra.out.Params, rb.out.Params, "the survivors' weights differ")
			g := gens[survivors[0]]
			require.Len(t, g, 2)
			assert.Equal(t, []int{victim}, g[1].Left)
			assert.Equal(t, survivors, g[1].Members)
			assert.Equal(t, int64(6), g[1].Step)
			for _, v := range ra.out.Params {
				require.False(t, v != v, "NaN weight")
			}
			base := cfgs[0].Ring.Optimizer.LR
			for _, id := range survivors {
				want := []float64{base, base}
				if tc.scaleLR {
					want = []float64{3 * base, 2 * base}
				}
				var lrs []float64
				for _, g := range gens[id] {
					lrs = append(lrs, g.LR)
				}
				assert.InDeltaSlice(t, want, lrs, 1e-12, "member %d's learning rate in generations of 3 and 2", id)
			}
		})
	}
}

// A member that starts while two train is taken in at a step boundary,
// takes up their state, and all three finish alike: their weights, and
// their optimizer's state, which the re-form carries over (before, each
// generation's ring started from a zero state: every rank's optimizer
// had counted the last generation's steps only, and lost its momentum).
//
// With the weights and state resident on each member's device
// (RingConfig.Resident, here nn's host device), the same: a re-form
// takes the device's weights and state, which each run's Finish copied
// back.
func TestAJoiningMemberIsTakenIn(t *testing.T) {
	for _, resident := range []bool{false, true} {
		t.Run(fmt.Sprint("resident ", resident), func(t *testing.T) { testAJoiningMemberIsTakenIn(t, resident) })
	}
}

func testAJoiningMemberIsTakenIn(t *testing.T, resident bool) {
	j := newJob(t, 2)
	j.roster.set(0, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfgs := []Config{j.member(0, 2), j.member(1, 2), j.member(2, 2)}
	if resident {
		for i := range cfgs {
			dm, err := nn.NewOnDevice(j.spec, nn.NewHostDevice(nil))
			require.NoError(t, err)
			defer dm.Close()
			cfgs[i].Model, cfgs[i].Ring.Resident = dm, dm
			// No desync check: only the runs' ends copy the weights back.
			cfgs[i].Ring.DesyncEvery = 0
		}
	}
	joined := make(chan (<-chan outcome), 1)
	var once sync.Once
	cfgs[0].Worker.OnStep = func(step int64, _ worker.StepTimes) {
		if step == 3 {
			once.Do(func() {
				j.roster.set(0, 1, 2)
				joined <- run(ctx, cfgs[2])
			})
		}
	}
	a, b := run(ctx, cfgs[0]), run(ctx, cfgs[1])
	c := <-joined
	ra, rb, rc := <-a, <-b, <-c
	require.NoError(t, ra.err)
	require.NoError(t, rb.err)
	require.NoError(t, rc.err)
	assert.Equal(t, 2, ra.out.Generations)
	assert.Equal(t, 1, rc.out.Generations)
	assert.Equal(t, ra.out.Steps, rc.out.Steps)
	assert.Equal(t, ra.out.Params, rb.out.Params)
	assert.Equal(t, ra.out.Params, rc.out.Params, "the joiner's weights differ")
	assert.Equal(t, 3, rc.out.Size)
	for i, r := range []outcome{ra, rb, rc} {
		assert.Equal(t, r.out.Steps, r.out.Ring.State().Steps, "member %d: optimizer steps against steps trained", i)
	}
	assert.Equal(t, ra.out.Ring.State(), rc.out.Ring.State(), "the joiner's optimizer state differs")
	assert.NotEqual(t, cfgs[0].Initial, ra.out.Params, "the weights trained")
	assert.NotEqual(t, make([]float32, len(ra.out.Params)), ra.out.Ring.State().Slots[optim.SlotMomentumBuffer], "the momentum came back")
}

// Below --min-workers the survivor waits --rejoin-timeout, then stops
// saying who left and when.
func TestBelowMinWorkersTheJobStops(t *testing.T) {
	j := newJob(t, 2)
	j.min, j.rejoin = 2, 300*time.Millisecond
	j.roster.set(0, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfgs := []Config{j.member(0, 2), j.member(1, 2)}
	kctx, kill := context.WithCancel(ctx)
	// Member 1 dies once member 0 has finished step 2 too (see
	// TestSurvivorsReformAndFinish), so it left at step 3.
	survived := make(chan struct{}, 1)
	cfgs[0].Worker.OnStep = func(step int64, _ worker.StepTimes) {
		if step == 2 {
			survived <- struct{}{}
		}
	}
	cfgs[1].Worker.OnStep = func(step int64, _ worker.StepTimes) {
		if step == 2 {
			select {
			case <-survived:
			case <-ctx.Done():
			}
			kill()
		}
	}
	a, dead := run(ctx, cfgs[0]), run(kctx, cfgs[1])
	<-dead
	j.roster.set(0)
	ra := <-a
	require.Error(t, ra.err)
	assert.Contains(t, ra.err.Error(), "--min-workers")
	assert.Contains(t, ra.err.Error(), "member(s) 1 of generation 1 left at step 3")
	assert.Contains(t, ra.err.Error(), "--rejoin-timeout")
}

// Only the lowest live member coordinates; the others name it.
func TestOnlyTheLowestLiveMemberCoordinates(t *testing.T) {
	r := &roster{}
	r.set(0, 1)
	c, err := NewCoordinator(CoordinatorConfig{JobID: "j", Self: 1, Initial: 2, MinWorkers: 1, RejoinTimeout: time.Minute, Roster: r,
		Listen: func() (net.Listener, error) { return fakeListener{}, nil }})
	require.NoError(t, err)
	_, err = c.Reform(context.Background(), &pb.ReformRequest{JobId: "j", Member: 1})
	assert.Equal(t, codes.FailedPrecondition, status.Code(err))
	assert.Contains(t, err.Error(), "member 0 at member-0 does")
	_, err = c.Reform(context.Background(), &pb.ReformRequest{JobId: "other", Member: 1})
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
	_, err = c.Reform(context.Background(), &pb.ReformRequest{JobId: "j", Member: -3})
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
	_, err = c.Reform(context.Background(), &pb.ReformRequest{JobId: "j", Member: 0, Generation: 1 << 63})
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
	// A member gossip does not know (a client that never joined, or one
	// whose gossip has not spread yet) is refused, even by the
	// coordinator.
	r.set(1, 2)
	_, err = c.Reform(context.Background(), &pb.ReformRequest{JobId: "j", Member: 7})
	assert.Equal(t, codes.FailedPrecondition, status.Code(err))
	assert.Contains(t, err.Error(), "member 7 is not in the job's membership")
	assert.False(t, c.Pending(), "a refused request does not interrupt the ring")
	// A request in member 2's name from another host than membership
	// holds for member 2 (roster addresses are member-N: an IP here).
	r.mu.Lock()
	r.live[1].Addr = "10.0.0.2:7000"
	r.mu.Unlock()
	from := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 9), Port: 4000}})
	_, err = c.Reform(from, &pb.ReformRequest{JobId: "j", Member: 2})
	assert.Equal(t, codes.PermissionDenied, status.Code(err))
	assert.Contains(t, err.Error(), "member 2 is at 10.0.0.2 in the membership, but this request came from 10.0.0.9")
	// Over loopback, a member that gossips on one of this machine's
	// addresses is this machine's.
	r.mu.Lock()
	r.live[1].Addr = "127.0.0.2:7000"
	r.mu.Unlock()
	lo := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 4000}})
	assert.NoError(t, c.checkCaller(lo, 2))
	r.mu.Lock()
	r.live[1].Addr = "192.0.2.1:7000" // TEST-NET-1: no machine's
	r.mu.Unlock()
	assert.Equal(t, codes.PermissionDenied, status.Code(c.checkCaller(lo, 2)), "loopback does not vouch for another machine's member")
	assert.False(t, errors.Is(err, context.Canceled))
}

// A member cut off from the others (a network partition: gossip says they
// are dead) is not a quorum of its generation: it waits for them, and
// fails after --rejoin-timeout, rather than train a ring of its own. Half
// of a generation goes on only with its lowest member.
func TestASmallerSideOfAPartitionDoesNotGoOn(t *testing.T) {
	ask := func(self int, live []int, previous []int32) error {
		r := &roster{}
		r.set(live...)
		c, err := NewCoordinator(CoordinatorConfig{JobID: "j", Self: self, Initial: 4, MinWorkers: 1, RejoinTimeout: 200 * time.Millisecond, Roster: r,
			Listen: func() (net.Listener, error) { return fakeListener{}, nil }})
		require.NoError(t, err)
		res := c.reform(context.Background(), &pb.ReformRequest{JobId: "j", Member: int32(self), Generation: 1, Step: 10, Previous: previous})
		if res.lis != nil {
			res.lis.Close()
		}
		return res.err
	}
	err := ask(2, []int{2}, []int32{0, 1, 2, 3})
	require.Error(t, err)
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.Contains(t, err.Error(), "only 1 of the 4 members [0 1 2 3] of generation 1 are here, not a quorum")
	err = ask(1, []int{1}, []int32{0, 1})
	assert.Contains(t, err.Error(), "not a quorum (more than half, or half with member 0)")
	assert.NoError(t, ask(0, []int{0}, []int32{0, 1}), "half with the lowest member goes on")
	assert.NoError(t, ask(0, []int{0}, []int32{0}), "a ring of one goes on alone")
}
