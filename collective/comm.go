package collective

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shoalml/shoal/wire"
)

// Op is the reduction of Allreduce and ReduceScatter.
type Op int

const (
	// Sum adds the ranks' values.
	Sum Op = iota
	// Average is Sum scaled by 1/N.
	Average
	// Min keeps the smallest value (NaN if any is NaN).
	Min
	// Max keeps the largest value (NaN if any is NaN).
	Max
)

func (o Op) String() string {
	switch o {
	case Sum:
		return "sum"
	case Average:
		return "average"
	case Min:
		return "min"
	case Max:
		return "max"
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

func (o Op) valid() bool { return o >= Sum && o <= Max }

// Compression is the on-the-wire format of the float32 data of Allreduce,
// ReduceScatter and Allgather. Values are always accumulated in float32;
// only what travels is narrowed. Broadcast, Alltoall and AllreduceAdasum
// always send float32.
type Compression int

const (
	// None sends float32.
	None Compression = iota
	// Float16 sends IEEE 754 half precision: 11 significant bits, range
	// ±65504 (larger sums become ±Inf), subnormals down to 2⁻²⁴.
	Float16
	// BFloat16 sends bfloat16: 8 significant bits, float32's range.
	BFloat16
)

func (c Compression) String() string {
	switch c {
	case None:
		return "none"
	case Float16:
		return "float16"
	case BFloat16:
		return "bfloat16"
	}
	return fmt.Sprintf("Compression(%d)", int(c))
}

// ParseCompression parses the names String returns ("none", "float16",
// "bfloat16"), and "fp16" and "bf16".
func ParseCompression(s string) (Compression, error) {
	switch strings.ToLower(s) {
	case "none", "":
		return None, nil
	case "float16", "fp16", "half":
		return Float16, nil
	case "bfloat16", "bf16":
		return BFloat16, nil
	}
	return None, fmt.Errorf("unknown compression %q, want none, float16 or bfloat16", s)
}

// Algorithm is how Allreduce reduces: the ring, recursive doubling (Tree),
// host by host (Hierarchical), or one of them by the message's size and
// the group's (Auto).
type Algorithm int

const (
	// Ring is reduce-scatter then allgather around the ring: 2(N−1)
	// rounds, each of 1/N of the vector; bandwidth-optimal.
	Ring Algorithm = iota
	// Tree is recursive doubling: log2(N) rounds (two more where N is
	// not a power of two), each of the whole vector; latency-logarithmic.
	Tree
	// Auto takes Tree or Hierarchical where its cost, by
	// ChooseAlgorithmOnHosts's model, is below the ring's: Tree for short
	// messages on many ranks, Hierarchical where the ranks sit on two or
	// more hosts of two or more ranks each, all hosts alike.
	Auto
	// Hierarchical is Horovod's hierarchical allreduce over the hosts the
	// Transport reports (HostLocator; one host without it): a
	// reduce-scatter among the L ranks of each host, then an allreduce
	// (a ring) of each shard by the ranks that own it, one per host, all
	// L of them at once over their own cross-host rings, then an
	// allgather within each host: 2(L−1) rounds of 1/L of the vector on
	// the host's links and 2(H−1) rounds of 1/N through its NIC, H hosts.
	// Where hosts hold different numbers of ranks it runs the flat Ring.
	Hierarchical
)

func (a Algorithm) String() string {
	switch a {
	case Ring:
		return "ring"
	case Tree:
		return "tree"
	case Auto:
		return "auto"
	case Hierarchical:
		return "hierarchical"
	}
	return fmt.Sprintf("Algorithm(%d)", int(a))
}

// ParseAlgorithm parses the names String returns.
func ParseAlgorithm(s string) (Algorithm, error) {
	for _, a := range []Algorithm{Ring, Tree, Auto, Hierarchical} {
		if strings.EqualFold(s, a.String()) {
			return a, nil
		}
	}
	return Ring, fmt.Errorf("unknown allreduce algorithm %q, want auto, ring, tree or hierarchical", s)
}

// Auto's cost model: a hop's latency and a link's bandwidth of the
// clusters Shoal plans for (shoal bench plan's defaults, 25 µs and 25
// Gbit/s).
const (
	autoLatency  = 25e-6          // seconds
	autoBytesPer = 25e9 / 8 / 1e6 // bytes per microsecond
)

// ChooseAlgorithm is the algorithm Auto runs for an Allreduce of bytes
// on size ranks: Tree where its α-β cost (rounds·α + bytes/B a round) is
// below the ring's (2(N−1)·α + 2(N−1)/N·bytes/B), else Ring. With α = 25
// µs and B = 25 Gbit/s that is below about 690 KB at 8 ranks, 2.3 MB at
// 64, 20 MB at 1,024 (and 47 KB at 3, where the fold's two rounds cost
// most); at 2 ranks the two cost the same and Ring is kept.
func ChooseAlgorithm(bytes, size int) Algorithm {
	if size <= 2 {
		return Ring
	}
	us := func(rounds, perRound float64) float64 { return rounds*autoLatency*1e6 + perRound/autoBytesPer }
	n := float64(size)
	treeRounds := float64(bits.Len(uint(size)) - 1)
	if size&(size-1) != 0 {
		treeRounds += 2
	}
	tree := us(treeRounds, treeRounds*float64(bytes))
	ring := us(2*(n-1), 2*(n-1)/n*float64(bytes))
	if tree < ring {
		return Tree
	}
	return Ring
}

// ChooseAlgorithmOnHosts is the algorithm Auto runs for an Allreduce of
// bytes on size ranks on hosts of perHost ranks each (0: hosts of
// different sizes). With one host, one rank a host or unlike hosts, it
// is ChooseAlgorithm's choice. Otherwise the cheaper of Tree and
// Hierarchical by the same α-β model, every link alike (no credit for a
// host's links being faster than its NIC): Hierarchical costs
// 2(L−1)+2(H−1) rounds for the ring's bytes, 2(N−1)/N of the vector, so
// it always beats the ring, and the tree beats it for short messages.
func ChooseAlgorithmOnHosts(bytes, size, perHost int) Algorithm {
	if perHost < 2 || perHost >= size || size%perHost != 0 {
		return ChooseAlgorithm(bytes, size)
	}
	hosts := size / perHost
	n := float64(size)
	treeRounds := float64(bits.Len(uint(size)) - 1)
	if size&(size-1) != 0 {
		treeRounds += 2
	}
	us := func(rounds, perRound float64) float64 { return rounds*autoLatency*1e6 + perRound/autoBytesPer }
	tree := us(treeRounds, treeRounds*float64(bytes))
	hier := us(float64(2*(perHost-1)+2*(hosts-1)), 2*(n-1)/n*float64(bytes))
	if tree < hier {
		return Tree
	}
	return Hierarchical
}

// Config configures a Communicator. Start from DefaultConfig.
type Config struct {
	// SegmentBytes is the size of the float32 data in one pipelined
	// segment: collectives cut their buffers into segments of
	// SegmentBytes/4 floats, so no Send carries more than SegmentBytes
	// bytes. Smaller segments start the pipeline sooner; larger ones
	// cost fewer transport calls. At least 4.
	SegmentBytes int
	// Compression is the wire format of Allreduce, ReduceScatter and
	// Allgather. Every rank must use the same.
	Compression Compression
	// CallTimeout, when > 0, is the deadline of every collective call on
	// top of its ctx's, so a peer that went silent ends the call (with
	// context.DeadlineExceeded, and the Communicator broken) instead of
	// hanging it.
	CallTimeout time.Duration
	// Algorithm is Allreduce's: Ring (the default), Tree, Hierarchical or
	// Auto. Every rank must use the same. The other collectives, and
	// AllreduceAdasum (always its own tree), are not affected.
	Algorithm Algorithm
}

// DefaultConfig returns 1 MiB segments and no compression.
func DefaultConfig() Config {
	return Config{SegmentBytes: 1 << 20, Compression: None}
}

func (c Config) validate() error {
	if c.SegmentBytes < 4 {
		return fmt.Errorf("collective: Config.SegmentBytes is %d, want at least 4 (DefaultConfig uses %d)", c.SegmentBytes, DefaultConfig().SegmentBytes)
	}
	if c.CallTimeout < 0 {
		return fmt.Errorf("collective: Config.CallTimeout is %v, want 0 (none) or more", c.CallTimeout)
	}
	if c.Algorithm < Ring || c.Algorithm > Hierarchical {
		return fmt.Errorf("collective: Config.Algorithm is %v, want Ring, Tree, Auto or Hierarchical", c.Algorithm)
	}
	if c.Compression < None || c.Compression > BFloat16 {
		return fmt.Errorf("collective: Config.Compression is %v, want None, Float16 or BFloat16", c.Compression)
	}
	return nil
}

// ErrBroken is returned, wrapping the first failure, by every collective
// called after one failed part-way: the byte streams to the peers are out
// of step, so the group must be formed again (new transports, new
// Communicator). Argument errors and a ctx that ended before the call
// started do not break a Communicator.
var ErrBroken = errors.New("communicator broken by an earlier failed collective")

// Communicator runs collectives over one Transport. It runs one collective
// at a time (a second concurrent call fails), and every rank must call the
// same collectives in the same order with matching arguments. It reuses
// internal buffers between calls and does not own the Transport.
type Communicator struct {
	t          Transport
	cfg        Config
	rank, size int
	avgN       int  // what Average divides by: size, or the parent's for a hierarchy's cross-host ring
	segElems   int  // floats per segment
	native     bool // uncompressed float32 goes to the wire without copying
	busy       atomic.Bool
	broken     error
	cancel     context.CancelFunc // of the call's CallTimeout; set by begin, called by end

	// Ring engine state, shared between the caller's goroutine (which
	// receives) and the sender goroutine of one call.
	steps      []ringStep
	progress   atomic.Int64  // receive segments completed in this call
	notify     chan struct{} // cap 1: progress moved
	sent       atomic.Int64  // send segments whose Send returned in this call
	sentNotify chan struct{} // cap 1: sent moved
	errMu      sync.Mutex
	err        error // the call's first error

	sendBuf []byte    // the sender's wire scratch, one segment
	recvBuf []byte    // the receiver's wire scratch, one segment
	recvF32 []float32 // the receiver's decoded segment, before reducing
	vec     []float32 // whole-vector scratch: ReduceScatter partials, AdaSum peer vector
	offs    []int     // block offsets
	sendTok [1]byte   // Barrier tokens
	recvTok [1]byte

	hier *hierarchy // Hierarchical's groups, made at its first use
}

// New returns a Communicator for t's rank. t must stay open while the
// Communicator is used.
func New(t Transport, cfg Config) (*Communicator, error) {
	if t == nil {
		return nil, errors.New("collective: nil Transport")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	rank, size := t.Rank(), t.Size()
	if size < 1 || rank < 0 || rank >= size {
		return nil, fmt.Errorf("collective: transport says rank %d of size %d, want 0 <= rank < size", rank, size)
	}
	return &Communicator{
		t:          t,
		cfg:        cfg,
		rank:       rank,
		size:       size,
		avgN:       size,
		segElems:   cfg.SegmentBytes / 4,
		native:     wire.NativeLittleEndian,
		notify:     make(chan struct{}, 1),
		sentNotify: make(chan struct{}, 1),
	}, nil
}

// Rank is this process's rank, 0..Size()−1.
func (c *Communicator) Rank() int { return c.rank }

// Size is the number of ranks.
func (c *Communicator) Size() int { return c.size }

// Blocks splits n elements into size blocks whose lengths differ by at
// most one, the first n%size blocks being the longer: the blocks of
// ReduceScatter and of the ring; when n < size the last size−n are empty.
// It panics if n < 0 or size < 1.
func Blocks(n, size int) []int {
	if n < 0 || size < 1 {
		panic(fmt.Sprintf("collective.Blocks(%d, %d): want n >= 0 and size >= 1", n, size))
	}
	b := make([]int, size)
	for i := range b {
		_, b[i] = blockRange(n, size, i)
	}
	return b
}

// blockRange returns the offset and length of block i of Blocks(n, size).
func blockRange(n, size, i int) (off, length int) {
	q, r := n/size, n%size
	if i < r {
		return i * (q + 1), q + 1
	}
	return r*(q+1) + (i-r)*q, q
}

// begin starts a collective: it refuses concurrent calls, calls on a
// broken Communicator, and an already-ended ctx, and returns the call's
// context (with Config.CallTimeout). end must follow when begin returns
// nil.
func (c *Communicator) begin(ctx context.Context, name string) (context.Context, error) {
	if !c.busy.CompareAndSwap(false, true) {
		return nil, fmt.Errorf("%s: another collective is running on this Communicator; calls must be sequential", name)
	}
	if c.broken != nil {
		c.busy.Store(false)
		return nil, fmt.Errorf("%s: %w: %w", name, ErrBroken, c.broken)
	}
	if err := ctx.Err(); err != nil {
		c.busy.Store(false)
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if c.cfg.CallTimeout > 0 {
		ctx, c.cancel = context.WithTimeout(ctx, c.cfg.CallTimeout)
	}
	return ctx, nil
}

// end finishes a collective begun with begin; a failure breaks c.
func (c *Communicator) end(err error) error {
	if c.cancel != nil {
		c.cancel()
		c.cancel = nil
	}
	if err != nil {
		c.broken = err
	}
	c.busy.Store(false)
	return err
}

// mod returns a mod c.size in 0..size−1.
func (c *Communicator) mod(a int) int { return ((a % c.size) + c.size) % c.size }

func (c *Communicator) validOp(name string, op Op) error {
	if !op.valid() {
		return fmt.Errorf("%s: unknown op %v, want Sum, Average, Min or Max", name, op)
	}
	return nil
}

// Allreduce reduces buf element-wise over all ranks with op, in place:
// on return every rank's buf holds the same result. Every rank must pass
// the same len(buf) and op. By default (Config.Algorithm) it is a ring,
// reduce-scatter then allgather,
// with the blocks cut into segments that are pipelined (a sender goroutine
// sends while the caller's goroutine receives and reduces). With
// compression the result is a value of the wire format, the same on every
// rank. With one rank it returns at once, buf unchanged (not rounded).
func (c *Communicator) Allreduce(ctx context.Context, buf []float32, op Op) error {
	const name = "allreduce"
	if err := c.validOp(name, op); err != nil {
		return err
	}
	ctx, err := c.begin(ctx, name)
	if err != nil {
		return err
	}
	if c.size == 1 {
		return c.end(nil)
	}
	alg := c.cfg.Algorithm
	if alg == Auto || alg == Hierarchical {
		h, err := c.hierarchy()
		if err != nil {
			return c.end(fmt.Errorf("%s: %w", name, err))
		}
		if alg == Auto {
			alg = ChooseAlgorithmOnHosts(4*len(buf), c.size, h.layout.perHost)
		}
	}
	switch alg {
	case Tree:
		return c.end(c.allreduceTree(ctx, name, buf, op))
	case Hierarchical:
		if c.hier.local != nil {
			return c.end(c.allreduceHier(ctx, name, buf, op))
		}
	}
	return c.end(c.allreduceRing(ctx, name, buf, op))
}

// allreduceRing is Allreduce by the ring.
func (c *Communicator) allreduceRing(ctx context.Context, name string, buf []float32, op Op) error {
	n, N, r := len(buf), c.size, c.rank
	c.steps = c.steps[:0]
	block := func(b int) []float32 {
		off, l := blockRange(n, N, c.mod(b))
		return buf[off : off+l]
	}
	// Reduce-scatter: step t sends block r−1−t and reduces block r−2−t,
	// ending with rank r owning the full reduction of block r.
	for t := range N - 1 {
		c.steps = append(c.steps, ringStep{
			send: block(r - 1 - t), recv: block(r - 2 - t), red: block(r - 2 - t),
			final: t == N-2,
		})
	}
	// Allgather: step t passes block r−t on and receives block r−t−1,
	// which reduce-scatter step t sent.
	for t := range N - 1 {
		c.steps = append(c.steps, ringStep{send: block(r - t), recv: block(r - t - 1)})
	}
	c.chain()
	for t := range N - 1 {
		c.steps[N-1+t].after = t
	}
	return c.runRing(ctx, name, op, c.cfg.Compression, true)
}

// ReduceScatter reduces in element-wise over all ranks with op and writes
// this rank's block of the result to out: block Rank() of
// Blocks(len(in), Size()). Every rank must pass the same len(in) and op;
// in is not modified and out must not overlap it.
func (c *Communicator) ReduceScatter(ctx context.Context, in, out []float32, op Op) error {
	const name = "reducescatter"
	if err := c.validOp(name, op); err != nil {
		return err
	}
	n, N, r := len(in), c.size, c.rank
	if _, l := blockRange(n, N, r); len(out) != l {
		return fmt.Errorf("%s: out has %d floats, want %d (block %d of Blocks(%d, %d))", name, len(out), l, r, n, N)
	}
	ctx, err := c.begin(ctx, name)
	if err != nil {
		return err
	}
	if N == 1 {
		copy(out, in)
		return c.end(nil)
	}
	c.vec = grow(c.vec, n)
	acc := c.vec[:n]
	c.steps = c.steps[:0]
	block := func(x []float32, b int) []float32 {
		off, l := blockRange(n, N, c.mod(b))
		return x[off : off+l]
	}
	for t := range N - 1 {
		st := ringStep{
			send: block(acc, r-1-t), recv: block(acc, r-2-t), red: block(in, r-2-t),
			final: t == N-2,
		}
		if t == 0 {
			st.send = block(in, r-1)
		}
		if st.final {
			st.recv = out
		}
		c.steps = append(c.steps, st)
	}
	c.chain()
	return c.end(c.runRing(ctx, name, op, c.cfg.Compression, false))
}

// Allgather concatenates every rank's in into out, in rank order: rank r
// contributes counts[r] floats (counts may differ per rank, and be 0).
// Every rank must pass the same counts; len(in) must be counts[Rank()]
// and len(out) their sum. in may alias this rank's part of out. With
// compression and more than one rank, every rank's part of out (its own
// too) is the wire format's rounding of in, the same on every rank. It is
// a pipelined ring.
func (c *Communicator) Allgather(ctx context.Context, in, out []float32, counts []int) error {
	const name = "allgather"
	N, r := c.size, c.rank
	if len(counts) != N {
		return fmt.Errorf("%s: counts has %d entries, want %d (one per rank)", name, len(counts), N)
	}
	c.offs = growInts(c.offs, N+1)
	offs := c.offs[:N+1]
	offs[0] = 0
	for i, k := range counts {
		if k < 0 {
			return fmt.Errorf("%s: counts[%d] is %d, want >= 0", name, i, k)
		}
		offs[i+1] = offs[i] + k
	}
	if len(in) != counts[r] {
		return fmt.Errorf("%s: in has %d floats, want counts[%d] = %d", name, len(in), r, counts[r])
	}
	if len(out) != offs[N] {
		return fmt.Errorf("%s: out has %d floats, want %d (the sum of counts)", name, len(out), offs[N])
	}
	ctx, err := c.begin(ctx, name)
	if err != nil {
		return err
	}
	own := out[offs[r]:offs[r+1]]
	copy(own, in)
	if N == 1 {
		return c.end(nil)
	}
	c.cfg.Compression.quantize(own)
	block := func(b int) []float32 {
		b = c.mod(b)
		return out[offs[b]:offs[b+1]]
	}
	c.steps = c.steps[:0]
	for t := range N - 1 {
		c.steps = append(c.steps, ringStep{send: block(r - t), recv: block(r - t - 1)})
	}
	c.chain()
	return c.end(c.runRing(ctx, name, Sum, c.cfg.Compression, false))
}

// Broadcast copies root's buf to every rank's buf. Every rank must pass
// the same len(buf) and root. It is a pipelined chain root → root+1 → … →
// root−1: each rank forwards a segment as soon as it has it, so a large
// buffer takes about (N−1 + segments) segment times, close to one buffer
// time for any N, where a binomial tree takes log₂N buffer times. Shoal
// broadcasts whole models (megabytes) to a few ranks, where the chain
// wins; its cost for tiny buffers, N−1 latencies instead of log₂N, is
// small at those N. Data travels as float32, never compressed.
func (c *Communicator) Broadcast(ctx context.Context, buf []float32, root int) error {
	const name = "broadcast"
	if root < 0 || root >= c.size {
		return fmt.Errorf("%s: root is %d, want 0..%d", name, root, c.size-1)
	}
	ctx, err := c.begin(ctx, name)
	if err != nil {
		return err
	}
	return c.end(c.broadcast(ctx, name, buf, root))
}

func (c *Communicator) broadcast(ctx context.Context, name string, buf []float32, root int) error {
	N := c.size
	if N == 1 {
		return nil
	}
	pos := c.mod(c.rank - root)
	st := ringStep{send: buf, recv: buf, noSend: pos == N-1, noRecv: pos == 0, dep: -1, after: -1}
	if !st.noSend && !st.noRecv {
		st.dep = 0 // forward segment j once it has arrived
	}
	c.steps = append(c.steps[:0], st)
	return c.runRing(ctx, name, Sum, None, false)
}

// Alltoall sends sendCounts[j] floats of in to each rank j (in rank
// order, the part for rank j at offset sendCounts[0]+…+sendCounts[j−1])
// and receives recvCounts[j] floats from each rank j into out, likewise
// laid out. recvCounts[j] on this rank must equal sendCounts[Rank()] on
// rank j; a mismatch desynchronizes the streams (the call then fails or
// meets its deadline) and is not detected. in and out must not overlap.
// Data travels as float32. Each rank sends to rank+1, rank+2, … while it
// receives from rank−1, rank−2, …; after a peer fails it still serves the
// others, so every live rank returns the failure instead of waiting.
func (c *Communicator) Alltoall(ctx context.Context, in []float32, sendCounts []int, out []float32, recvCounts []int) error {
	const name = "alltoall"
	N, r := c.size, c.rank
	if err := checkCounts(name, "sendCounts", sendCounts, N, "in", len(in)); err != nil {
		return err
	}
	if err := checkCounts(name, "recvCounts", recvCounts, N, "out", len(out)); err != nil {
		return err
	}
	if sendCounts[r] != recvCounts[r] {
		return fmt.Errorf("%s: sendCounts[%d] is %d but recvCounts[%d] is %d; this rank's part for itself must fit", name, r, sendCounts[r], r, recvCounts[r])
	}
	ctx, err := c.begin(ctx, name)
	if err != nil {
		return err
	}
	c.offs = growInts(c.offs, 2*(N+1))
	sOff, rOff := c.offs[:N+1], c.offs[N+1:2*(N+1)]
	for i := range N {
		sOff[i+1] = sOff[i] + sendCounts[i]
		rOff[i+1] = rOff[i] + recvCounts[i]
	}
	copy(out[rOff[r]:rOff[r+1]], in[sOff[r]:sOff[r+1]])
	err = c.exchange(ctx, name,
		func(ctx context.Context, peer int) error {
			return c.sendFloats(ctx, peer, in[sOff[peer]:sOff[peer+1]])
		},
		func(ctx context.Context, peer int) error {
			return c.recvFloats(ctx, peer, out[rOff[peer]:rOff[peer+1]])
		})
	return c.end(err)
}

func checkCounts(name, what string, counts []int, size int, buf string, n int) error {
	if len(counts) != size {
		return fmt.Errorf("%s: %s has %d entries, want %d (one per rank)", name, what, len(counts), size)
	}
	sum := 0
	for i, k := range counts {
		if k < 0 {
			return fmt.Errorf("%s: %s[%d] is %d, want >= 0", name, what, i, k)
		}
		sum += k
	}
	if sum != n {
		return fmt.Errorf("%s: %s sum to %d, %s has %d floats", name, what, sum, buf, n)
	}
	return nil
}

// Barrier returns once every rank has called it. Each rank sends a 1-byte
// token to every other rank and waits for theirs: one round of latency
// (a dissemination barrier takes log₂N rounds) for N−1 tiny messages per
// rank, and a dead peer is seen directly by every live rank.
func (c *Communicator) Barrier(ctx context.Context) error {
	const name = "barrier"
	ctx, err := c.begin(ctx, name)
	if err != nil {
		return err
	}
	c.sendTok[0] = 1
	err = c.exchange(ctx, name,
		func(ctx context.Context, peer int) error { return c.t.Send(ctx, peer, c.sendTok[:]) },
		func(ctx context.Context, peer int) error {
			if err := c.t.Recv(ctx, peer, c.recvTok[:]); err != nil {
				return err
			}
			if c.recvTok[0] != 1 {
				return &PeerError{Rank: peer, Err: fmt.Errorf("barrier token is %d, want 1: streams out of step", c.recvTok[0])}
			}
			return nil
		})
	return c.end(err)
}

func grow(x []float32, n int) []float32 {
	if cap(x) < n {
		return make([]float32, n)
	}
	return x[:n]
}

func growBytes(x []byte, n int) []byte {
	if cap(x) < n {
		return make([]byte, n)
	}
	return x[:n]
}

func growInts(x []int, n int) []int {
	if cap(x) < n {
		return make([]int, n)
	}
	return x[:n]
}
