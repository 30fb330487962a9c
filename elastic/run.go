package elastic

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/shoalml/shoal/collective"
	"github.com/shoalml/shoal/data"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
	pb "github.com/shoalml/shoal/proto/shoalpb"
	"github.com/shoalml/shoal/worker"
)

// Config configures one member's elastic ring training.
type Config struct {
	// Member is this member's id (its launch rank); JobID names the job.
	Member int
	JobID  string
	// Coordinator is this member's own Elastic service, which the caller
	// also serves over gRPC; Roster says who is alive.
	Coordinator *Coordinator
	Roster      Roster
	// Secret signs this member's Reform requests (Secret(gossip key)); the
	// other members' coordinators refuse unsigned ones where they have it.
	Secret []byte
	// Connect joins one generation's ring as rank of size, through the
	// rendezvous at master that rank 0 serves on lis (nil on the other
	// ranks); jobID names the generation.
	Connect func(ctx context.Context, rank, size int, master string, lis net.Listener, jobID string) (collective.Transport, error)
	// Comm configures each generation's communicator.
	Comm collective.Config
	// Model and Train are what every member trains; Initial the weights
	// it starts from (the same on every member: the model's seeded
	// initialisation).
	Model   nn.Model
	Train   data.Dataset
	Initial []float32
	// Ring configures the strategy (optimizer, reduce op, fusion, desync
	// check); Synced and Interrupt are set here.
	Ring worker.RingConfig
	// Worker configures the training (Batch, Epochs or Steps, Seed,
	// BackwardPasses, Progress, OnStep, Logger); Rank, WorldSize,
	// StartStep, Params and Eval are set here.
	Worker worker.Config
	// Ask sends a Reform to another member's Elastic service at addr;
	// nil: over gRPC, without TLS.
	Ask func(ctx context.Context, addr string, req *pb.ReformRequest) (*pb.ReformResponse, error)
	// DialOptions are the gRPC options of the default Ask's calls (the
	// credentials of the other members' Elastic services); default
	// plaintext.
	DialOptions []grpc.DialOption
	// CheckDial, when set, vets the address of the coordinator the
	// default Ask is about to call (the roster's gossip names it): an
	// error fails the re-form at once (secure.Credentials.CheckDial
	// refuses to send a token in the clear beyond loopback).
	CheckDial func(addr string) error
	// ReformTimeout bounds each re-form: finding the coordinator and
	// waiting for the round.
	ReformTimeout time.Duration
	// OnGeneration, when set, hears of every generation this member is in.
	OnGeneration func(Generation)
	Logger       *slog.Logger
}

// Generation is one formation of the ring, as one member sees it.
type Generation struct {
	Number  uint64
	Members []int // member ids in rank order
	Rank    int   // this member's rank
	// Left and Joined compare with this member's previous generation (all
	// members are "joined" in its first).
	Left, Joined []int
	// Step is where the generation starts: the steps its weights hold.
	Step int64
	// Reason is why this member left its previous generation.
	Reason string
	// LR is the learning rate of the generation's first step: with
	// worker.RingConfig.ScaleLR, the base times the generation's size.
	LR float64
}

// Outcome is a member's finished training: its last generation's ring,
// still connected, for the final evaluation. Close releases it.
type Outcome struct {
	Steps, Samples int64
	Elapsed        time.Duration // from the first generation's first step, re-forms included
	Last           worker.Progress
	Generations    int
	Rank, Size     int
	Comm           *collective.Communicator
	Ring           *worker.Ring
	Params         []float32
	transport      collective.Transport
}

// Close closes the last generation's transport.
func (o *Outcome) Close() error { return o.transport.Close() }

// position is where training stands: the steps done, the epoch, and, in
// an epoch that a change of world size split, the samples of it still to
// visit (nil: the whole epoch).
type position struct {
	step    int64
	epoch   int
	rest    []int
	inEpoch int64 // steps done in this epoch
}

type member struct {
	cfg    Config
	log    *slog.Logger
	params []float32
	// opt is the optimizer state that goes with params (nil before the
	// first generation trained): a new generation's ring starts from it.
	opt     *optim.State
	pos     position
	samples int64
	last    worker.Progress
	per     int     // samples per step and rank
	synced  uint64  // the generation whose state this member holds
	members []int32 // that generation's members
	// start is when this member's first generation began to train: the
	// run's elapsed time counts from there (re-forms included, the first
	// formation not).
	start time.Time
}

// Run trains as one member of an elastic ring: it joins a generation,
// adopts the root's weights, optimizer state and data position, trains
// until the end or until the ring breaks (a member died) or is
// interrupted (a member joins), and then joins the next generation. A
// step that a failure interrupts is not applied anywhere but where it
// completed, and the root's state is the one every rank takes up, so no
// rank goes on from a half-done step.
func Run(ctx context.Context, cfg Config) (*Outcome, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &member{cfg: cfg, log: log.With("component", "elastic", "member", cfg.Member), params: slices.Clone(cfg.Initial), per: cfg.Worker.Batch * max(cfg.Worker.BackwardPasses, 1)}
	var gen uint64
	var prev []int
	reason := "start"
	for n := 1; ; n++ {
		resp, lis, err := m.reform(ctx, gen, reason)
		if err != nil {
			return nil, err
		}
		out, err := m.generation(ctx, resp, lis, prev, reason)
		if err == nil {
			out.Elapsed, out.Generations = time.Since(m.start), n
			return out, nil
		}
		if !recoverable(ctx, err) {
			return nil, err
		}
		m.log.Info("left the generation", "generation", resp.Generation, "step", m.pos.step, "err", err)
		if m.trained(resp) {
			gen = resp.Generation
		}
		prev, reason = toInts(resp.Members), err.Error()
	}
}

func (cfg Config) check() error {
	switch {
	case cfg.Coordinator == nil || cfg.Roster == nil || cfg.Connect == nil:
		return errors.New("elastic: Run needs a Coordinator, a Roster and a Connect function")
	case cfg.Model == nil || cfg.Train == nil:
		return errors.New("elastic: Run needs a Model and a Train dataset")
	case len(cfg.Initial) != cfg.Model.Layout().Size():
		return fmt.Errorf("elastic: initial weights have %d floats, model %s has %d", len(cfg.Initial), cfg.Model.Name(), cfg.Model.Layout().Size())
	case cfg.Worker.Batch < 1:
		return fmt.Errorf("elastic: batch %d: want >= 1", cfg.Worker.Batch)
	case cfg.Worker.Steps <= 0 && cfg.Worker.Epochs < 1:
		return fmt.Errorf("elastic: epochs %d: want >= 1 (or steps > 0)", cfg.Worker.Epochs)
	case cfg.ReformTimeout <= 0:
		return fmt.Errorf("elastic: reform timeout %v: want > 0", cfg.ReformTimeout)
	}
	return nil
}

// recoverable says whether err ends a generation rather than the run: the
// ring broke (a peer died or timed out) or stopped for a re-form.
func recoverable(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	var lost errMemberLost
	return errors.Is(err, worker.ErrInterrupted) || errors.Is(err, collective.ErrPeer) || errors.Is(err, collective.ErrBroken) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.As(err, &lost) || errConnect(err)
}

// connectError marks a failure to connect a generation's ring.
type connectError struct{ err error }

func (e *connectError) Error() string { return e.err.Error() }
func (e *connectError) Unwrap() error { return e.err }

func errConnect(err error) bool {
	var ce *connectError
	return errors.As(err, &ce)
}

// trained says whether this member's state is that of generation resp:
// it synced with the root (so its position is the generation's).
func (m *member) trained(resp *pb.ReformResponse) bool { return m.synced == resp.Generation }

// reform gets this member into a new generation: it asks the live member
// with the lowest id, trying again (the roster may still name a member
// that died, or not yet name the coordinator) until ReformTimeout.
func (m *member) reform(ctx context.Context, gen uint64, reason string) (*pb.ReformResponse, net.Listener, error) {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.ReformTimeout)
	defer cancel()
	req := &pb.ReformRequest{JobId: m.cfg.JobID, Member: int32(m.cfg.Member), Generation: gen, Reason: reason, Step: m.pos.step, Previous: m.members}
	if err := sign(m.cfg.Secret, req); err != nil {
		return nil, nil, err
	}
	backoff := 20 * time.Millisecond
	var lastErr error
	for {
		resp, lis, err := m.ask(ctx, req)
		if err == nil {
			if err := checkResponse(resp, m.cfg.Member); err != nil {
				if lis != nil {
					lis.Close()
				}
				return nil, nil, err
			}
			return resp, lis, nil
		}
		switch status.Code(err) {
		case codes.InvalidArgument, codes.ResourceExhausted, codes.PermissionDenied:
			return nil, nil, err
		}
		lastErr = err
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil, fmt.Errorf("elastic: member %d found no new generation within --rejoin-timeout %v: %w", m.cfg.Member, m.cfg.ReformTimeout, lastErr)
		case <-t.C:
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// ask sends req to the member the roster says coordinates.
func (m *member) ask(ctx context.Context, req *pb.ReformRequest) (*pb.ReformResponse, net.Listener, error) {
	live := m.cfg.Roster.Live()
	if len(live) == 0 || live[0].ID >= m.cfg.Member {
		r := m.cfg.Coordinator.reform(ctx, req)
		return r.resp, r.lis, r.err
	}
	ask := m.cfg.Ask
	if ask == nil {
		ask = m.askGRPC
	}
	resp, err := ask(ctx, live[0].Addr, req)
	if err != nil {
		return nil, nil, fmt.Errorf("coordinator %d at %s: %w", live[0].ID, live[0].Addr, err)
	}
	return resp, nil, nil
}

func (m *member) askGRPC(ctx context.Context, addr string, req *pb.ReformRequest) (*pb.ReformResponse, error) {
	if m.cfg.CheckDial != nil {
		if err := m.cfg.CheckDial(addr); err != nil {
			return nil, status.Error(codes.PermissionDenied, err.Error())
		}
	}
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, m.cfg.DialOptions...)
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "%v", err)
	}
	defer conn.Close()
	return pb.NewElasticClient(conn).Reform(ctx, req)
}

// checkResponse refuses an answer this member cannot act on.
func checkResponse(resp *pb.ReformResponse, self int) error {
	if resp.Master == "" || len(resp.Members) == 0 {
		return fmt.Errorf("elastic: the coordinator answered with no members or no rendezvous address")
	}
	if !slices.Contains(resp.Members, int32(self)) {
		return fmt.Errorf("elastic: generation %d has members %v, not this member %d", resp.Generation, resp.Members, self)
	}
	if resp.Root < 0 || int(resp.Root) >= len(resp.Members) {
		return fmt.Errorf("elastic: generation %d names root rank %d of %d", resp.Generation, resp.Root, len(resp.Members))
	}
	return nil
}

func toInts(v []int32) []int {
	out := make([]int, len(v))
	for i, x := range v {
		out[i] = int(x)
	}
	return out
}
