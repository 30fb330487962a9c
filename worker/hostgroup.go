package worker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/shoalml/shoal/collective"
)

// GroupComm is what a HostGroup needs from a collective.Communicator over
// the workers of one host (shared memory, in Shoal's deployments). Its
// calls block until every rank of the group made the same call, and fail
// with a *collective.PeerError naming a rank that died or a deadline's
// error for one that went silent.
type GroupComm interface {
	Rank() int
	Size() int
	Allreduce(ctx context.Context, buf []float32, op collective.Op) error
	Broadcast(ctx context.Context, buf []float32, root int) error
}

var _ GroupComm = (*collective.Communicator)(nil)

// HostGroupConfig places a worker in its host's group.
type HostGroupConfig struct {
	// Host is the worker id the group's leader pushes and pulls as: with
	// host aggregation the shards count hosts, ids 0..hosts−1 (their
	// Workers is the number of hosts; sync's barrier and SSP's bound
	// count hosts).
	Host int64
	// Workers are the ranks (Config.Rank) of the group's workers, in
	// the order of their ranks in the GroupComm: Workers[0], the
	// GroupComm's rank 0, is the leader, the only one that talks to the
	// servers. Errors name a failed member by its rank here.
	Workers []int
	// Shards is the number of parameter-server shards.
	Shards int
}

// ErrLeaderFailed: the host group's leader's call to the servers failed;
// the group's other workers get it with the leader's rank.
var ErrLeaderFailed = errors.New("the host group's leader failed its call to the servers")

// HostGroup is per-host aggregation for the parameter-server strategies
// (BytePS's local reduce before one push per machine): it is the
// ParameterServers of every worker of one host. Each push first averages
// the group's gradients over the GroupComm; the leader alone pushes the
// mean, as worker Host, and its pull (or push-pull) brings the weights,
// which it broadcasts to the group with the shards' clocks and answers,
// so every worker's strategy (Sync, Async, SSP through Async, Local)
// runs as if it had made the call itself. The shards thus see one worker
// per host, whose batch is the group's total: with equal batches the
// mean of the hosts' means is the mean of all the workers' gradients,
// and sync training ends where it would without the groups.
//
// Every worker of a group must make the same calls in the same order
// (one Strategy each, of the same mode and steps), and one at a time:
// AsyncConfig.Overlap, whose push runs beside the next pull, is not
// possible (the GroupComm refuses a second call at once). A member that
// dies ends the group's calls with an error naming it; the group does
// not go on without it.
type HostGroup struct {
	ps   ParameterServers // the leader's; nil on the others
	comm GroupComm
	cfg  HostGroupConfig
	mean []float32 // the group's mean gradient, grown on first use
	hdr  []float32 // the leader's answer, broadcast (see header)
}

var _ ParameterServers = (*HostGroup)(nil)

// NewHostGroup returns the ParameterServers of the worker at comm's rank
// in its host's group; ps is the servers, needed by the leader (rank 0)
// only. The group needs no servers of its own beyond the leader's.
func NewHostGroup(ps ParameterServers, comm GroupComm, cfg HostGroupConfig) (*HostGroup, error) {
	switch {
	case comm == nil:
		return nil, errors.New("host group: no communicator among the host's workers")
	case comm.Size() != len(cfg.Workers):
		return nil, fmt.Errorf("host group of host %d: the communicator has %d ranks, Workers names %d workers; want one rank per worker", cfg.Host, comm.Size(), len(cfg.Workers))
	case cfg.Host < 0:
		return nil, fmt.Errorf("host group: host %d: want >= 0", cfg.Host)
	case cfg.Shards < 1:
		return nil, fmt.Errorf("host group of host %d: %d shards: want >= 1", cfg.Host, cfg.Shards)
	case comm.Rank() == 0 && ps == nil:
		return nil, fmt.Errorf("host group of host %d: the leader (worker %d) has no parameter servers to push to", cfg.Host, cfg.Workers[0])
	}
	return &HostGroup{ps: ps, comm: comm, cfg: cfg, hdr: make([]float32, headerLen(cfg.Shards))}, nil
}

// Leader reports whether this worker talks to the servers for its host.
func (g *HostGroup) Leader() bool { return g.comm.Rank() == 0 }

// The leader's answer to a call, broadcast to the group: int64 values,
// each as two float32 bit patterns (Broadcast copies them unchanged):
// status, waited (ns), dropped, duplicates, then per shard the clock, the
// staleness and the pull clock.
const (
	hdrStatus = iota
	hdrWaited
	hdrDropped
	hdrDuplicates
	hdrShards
)

func headerLen(shards int) int { return 2 * (hdrShards + 3*shards) }

func (g *HostGroup) put(i int, v int64) {
	g.hdr[2*i] = math.Float32frombits(uint32(uint64(v)))
	g.hdr[2*i+1] = math.Float32frombits(uint32(uint64(v) >> 32))
}

func (g *HostGroup) get(i int) int64 {
	return int64(uint64(math.Float32bits(g.hdr[2*i])) | uint64(math.Float32bits(g.hdr[2*i+1]))<<32)
}

// answer is what the leader's call brought, as the header carries it.
type answer struct {
	waited            time.Duration
	dropped, dupes    int
	clocks, staleness []int64
	pullClocks        []int64
}

// share broadcasts the leader's answer (or its failure, callErr) to the
// group; the others return it. After a failure no weights follow.
func (g *HostGroup) share(ctx context.Context, a answer, callErr error) (answer, error) {
	if g.Leader() {
		clear(g.hdr)
		if callErr != nil {
			g.put(hdrStatus, 1)
		}
		g.put(hdrWaited, int64(a.waited))
		g.put(hdrDropped, int64(a.dropped))
		g.put(hdrDuplicates, int64(a.dupes))
		for s := range g.cfg.Shards {
			g.put(hdrShards+3*s, at(a.clocks, s))
			g.put(hdrShards+3*s+1, at(a.staleness, s))
			g.put(hdrShards+3*s+2, at(a.pullClocks, s))
		}
	}
	if err := g.comm.Broadcast(ctx, g.hdr, 0); err != nil {
		return answer{}, g.groupErr(err)
	}
	if g.Leader() {
		return a, callErr
	}
	if g.get(hdrStatus) != 0 {
		return answer{}, fmt.Errorf("host %d: %w (worker %d); see its log for the cause", g.cfg.Host, ErrLeaderFailed, g.cfg.Workers[0])
	}
	a = answer{waited: time.Duration(g.get(hdrWaited)), dropped: int(g.get(hdrDropped)), dupes: int(g.get(hdrDuplicates)),
		clocks: make([]int64, g.cfg.Shards), staleness: make([]int64, g.cfg.Shards), pullClocks: make([]int64, g.cfg.Shards)}
	for s := range g.cfg.Shards {
		a.clocks[s] = g.get(hdrShards + 3*s)
		a.staleness[s] = g.get(hdrShards + 3*s + 1)
		a.pullClocks[s] = g.get(hdrShards + 3*s + 2)
	}
	return a, nil
}

func at(x []int64, i int) int64 {
	if i < len(x) {
		return x[i]
	}
	return 0
}

// groupErr names the member a failed collective points at.
func (g *HostGroup) groupErr(err error) error {
	var pe *collective.PeerError
	if errors.As(err, &pe) && pe.Rank >= 0 && pe.Rank < len(g.cfg.Workers) {
		return fmt.Errorf("host %d: worker %d of the host's group (its rank %d there) failed: %w", g.cfg.Host, g.cfg.Workers[pe.Rank], pe.Rank, err)
	}
	return fmt.Errorf("host %d: the host's group of workers %v: %w", g.cfg.Host, g.cfg.Workers, err)
}

// reduce averages grads over the group into g.mean.
func (g *HostGroup) reduce(ctx context.Context, grads []float32) error {
	if cap(g.mean) < len(grads) {
		g.mean = make([]float32, len(grads))
	}
	g.mean = g.mean[:len(grads)]
	copy(g.mean, grads)
	if err := g.comm.Allreduce(ctx, g.mean, collective.Average); err != nil {
		return g.groupErr(err)
	}
	return nil
}

// weights broadcasts the leader's dst to the group.
func (g *HostGroup) weights(ctx context.Context, dst []float32) error {
	if err := g.comm.Broadcast(ctx, dst, 0); err != nil {
		return g.groupErr(err)
	}
	return nil
}

// Pull is the leader's pull, as worker Host, and its weights and clocks
// broadcast to the group.
func (g *HostGroup) Pull(ctx context.Context, args PullArgs, dst []float32) ([]int64, error) {
	var a answer
	var err error
	waited := args.Waited
	if g.Leader() {
		args.WorkerID, args.Waited = g.cfg.Host, &a.waited
		a.pullClocks, err = g.ps.Pull(ctx, args, dst)
	}
	if a, err = g.share(ctx, a, err); err != nil {
		return nil, err
	}
	if waited != nil {
		*waited = a.waited
	}
	if err := g.weights(ctx, dst); err != nil {
		return nil, err
	}
	return a.pullClocks, nil
}

// Push averages the group's gradients; the leader pushes the mean as
// worker Host, and its result goes to the group.
func (g *HostGroup) Push(ctx context.Context, args PushArgs) (PushResult, error) {
	if err := g.reduce(ctx, args.Grads); err != nil {
		return PushResult{}, err
	}
	var a answer
	var err error
	if g.Leader() {
		args.WorkerID, args.Grads = g.cfg.Host, g.mean
		var res PushResult
		res, err = g.ps.Push(ctx, args)
		a = answer{dropped: res.Dropped, dupes: res.Duplicates, clocks: res.Clocks, staleness: res.Staleness}
	}
	if a, err = g.share(ctx, a, err); err != nil {
		return PushResult{}, err
	}
	return PushResult{Clocks: a.clocks, Duplicates: a.dupes, Dropped: a.dropped, Staleness: a.staleness}, nil
}

// PushPull averages the group's gradients; the leader push-pulls the
// mean as worker Host, and its result and the weights go to the group.
func (g *HostGroup) PushPull(ctx context.Context, args PushPullArgs) (PushPullResult, error) {
	if err := g.reduce(ctx, args.Grads); err != nil {
		return PushPullResult{}, err
	}
	var a answer
	var err error
	waited := args.Waited
	if g.Leader() {
		args.WorkerID, args.Grads, args.Waited = g.cfg.Host, g.mean, &a.waited
		var res PushPullResult
		res, err = g.ps.PushPull(ctx, args)
		a = answer{dropped: res.Dropped, dupes: res.Duplicates, clocks: res.Clocks, staleness: res.Staleness, pullClocks: res.PullClocks}
	}
	if a, err = g.share(ctx, a, err); err != nil {
		return PushPullResult{}, err
	}
	if waited != nil {
		*waited = a.waited
	}
	if err := g.weights(ctx, args.Dst); err != nil {
		return PushPullResult{}, err
	}
	return PushPullResult{PushResult: PushResult{Clocks: a.clocks, Duplicates: a.dupes, Dropped: a.dropped, Staleness: a.staleness}, PullClocks: a.pullClocks}, nil
}
