// Package tensorps is one worker of a parameter-server job whose model
// lives in another runtime (PyTorch, through cmd/libshoal): the runtime
// hands over flat float32 vectors, and the session exchanges them with
// Shoal's shards in the job's consistency mode, as Shoal's own workers
// do (package worker's Sync and Async strategies over package client).
//
// What a step pushes is the runtime's business. shoal.torch pushes each
// step's update as the wrapped optimizer computed it, negated (the
// weights it pulled minus the weights after its local step), to shards
// that run plain SGD with learning rate 1: the shards then add the
// update (async), the mean of the workers' updates (sync), or that mean
// spread over the round (SSP). For SGD with momentum and weight decay,
// whose update is linear in the gradient, the mean of the workers'
// updates from the same weights is the update of the mean gradient, so a
// sync job computes what a ring job computes.
//
// Every rank calls Open after rank 0 wrote the model's initial values
// (WriteModel) where the shards wait for them (shoal ps --init-from);
// every rank then begins at the same weights.
package tensorps

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/shoalml/shoal/client"
	"github.com/shoalml/shoal/cluster"
	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/nn"
	pb "github.com/shoalml/shoal/proto/shoalpb"
	"github.com/shoalml/shoal/ps"
	"github.com/shoalml/shoal/secure"
	"github.com/shoalml/shoal/worker"
	"github.com/shoalml/shoal/worker/psclient"
)

// Config is one worker's view of the job.
type Config struct {
	// Servers are the shards' addresses, in shard order.
	Servers []string
	// Rank is this worker's id; Size the number of workers.
	Rank, Size int
	// Mode is the servers' mode: Async, Sync or SSP.
	Mode consistency.Mode
	// Creds are the TLS and token credentials (nil: plaintext).
	Creds *secure.Credentials
	// ConnectTimeout bounds dialing and joining; CallTimeout each call
	// (a sync step waits for the slowest worker within it).
	ConnectTimeout, CallTimeout time.Duration
	// Notice, when set, hears why a shard cannot be reached yet while
	// Open goes on trying (client.WithConnectNotice).
	Notice func(addr string, err error)
	// Encoding is how pushes travel: float32, or halved to float16 or
	// bfloat16 (the shards apply them in float32), or int8 with a scale
	// per block for pseudo-gradients (LocalSteps > 0; shards without
	// local steps refuse it).
	Encoding pb.Encoding
	// LocalSteps is the H the runtime takes between pushes (DiLoCo: each
	// push is the pseudo-gradient of H steps), 0 for a push every step.
	// The shards must run with the same --local-steps.
	LocalSteps int
}

// DefaultConfig has the deadlines Shoal's workers have.
func DefaultConfig() Config {
	return Config{Mode: consistency.Async, ConnectTimeout: time.Minute, CallTimeout: 10 * time.Minute}
}

// ConfigFromEnv fills cfg from what shoal run sets: SHOAL_MODE,
// SHOAL_SERVERS, the rank and size (cluster.FromEnv: SHOAL_*, Open MPI,
// Slurm, torchrun), SHOAL_LOCAL_STEPS, SHOAL_COMPRESSION (Encoding: none,
// fp16, bf16, or int8 with local steps) and SHOAL_AUTH_TOKEN_FILE,
// SHOAL_TLS_CERT, SHOAL_TLS_KEY, SHOAL_TLS_CA.
func ConfigFromEnv(cfg Config, getenv func(string) string) (Config, error) {
	m, err := consistency.Parse(getenv("SHOAL_MODE"))
	if err != nil {
		return cfg, fmt.Errorf("SHOAL_MODE: %w", err)
	}
	if m == consistency.Ring {
		return cfg, errors.New("SHOAL_MODE=ring: the gradients go over the ring, not to parameter servers")
	}
	cfg.Mode = m
	if s := getenv("SHOAL_SERVERS"); s != "" {
		cfg.Servers = strings.Split(s, ",")
	}
	if len(cfg.Servers) == 0 {
		return cfg, fmt.Errorf("SHOAL_MODE=%s: SHOAL_SERVERS is empty: want the shards' addresses, host:port,host:port (shoal run sets it)", m)
	}
	id, err := cluster.FromEnv(getenv)
	if err != nil {
		return cfg, err
	}
	cfg.Rank, cfg.Size = id.Rank, id.WorldSize
	if h := getenv("SHOAL_LOCAL_STEPS"); h != "" {
		if cfg.LocalSteps, err = strconv.Atoi(h); err != nil || cfg.LocalSteps < 0 || cfg.LocalSteps > ps.MaxLocalSteps {
			return cfg, fmt.Errorf("SHOAL_LOCAL_STEPS=%q: want the number of local steps between pushes, 0..%d (shoal run --local-steps sets it)", h, ps.MaxLocalSteps)
		}
	}
	if cfg.Encoding, err = encodingFromEnv(getenv("SHOAL_COMPRESSION"), cfg.LocalSteps); err != nil {
		return cfg, err
	}
	files := secure.Files{Cert: getenv("SHOAL_TLS_CERT"), Key: getenv("SHOAL_TLS_KEY"), CA: getenv("SHOAL_TLS_CA"), Token: getenv("SHOAL_AUTH_TOKEN_FILE")}
	if cfg.Creds, err = secure.Load(files); err != nil {
		return cfg, fmt.Errorf("SHOAL_TLS_*/SHOAL_AUTH_TOKEN_FILE: %w", err)
	}
	return cfg, nil
}

// encodingFromEnv is SHOAL_COMPRESSION's encoding ("" is none): int8
// only for pseudo-gradients (localSteps > 0), as the Go workers' rule.
func encodingFromEnv(s string, localSteps int) (pb.Encoding, error) {
	switch strings.ToLower(s) {
	case "", "none":
		return pb.Encoding_FLOAT32, nil
	case "fp16", "float16":
		return pb.Encoding_FLOAT16, nil
	case "bf16", "bfloat16":
		return pb.Encoding_BFLOAT16, nil
	case "int8":
		if localSteps == 0 {
			return pb.Encoding_FLOAT32, errors.New("SHOAL_COMPRESSION=int8: for pseudo-gradients only, and SHOAL_LOCAL_STEPS is unset: each step's update would round its small values to zero (shoal run --compression int8 needs --local-steps)")
		}
		return pb.Encoding_INT8, nil
	}
	return pb.Encoding_FLOAT32, fmt.Errorf("SHOAL_COMPRESSION=%q: want none, fp16, bf16 or int8 (shoal run --compression sets it)", s)
}

// WithScriptEncoding is cfg with the encoding the runtime's own
// optimizer asks for (shoal.torch's compression=): float32 keeps
// cfg.Encoding (SHOAL_COMPRESSION's); another must be cfg's or come
// where cfg has float32.
func (cfg Config) WithScriptEncoding(e pb.Encoding) (Config, error) {
	switch {
	case e == pb.Encoding_FLOAT32 || e == cfg.Encoding:
		return cfg, nil
	case cfg.Encoding != pb.Encoding_FLOAT32:
		return cfg, fmt.Errorf("the DistributedOptimizer's compression is %s and SHOAL_COMPRESSION (shoal run --compression) is %s: give one, or the same", encodingName(e), encodingName(cfg.Encoding))
	}
	cfg.Encoding = e
	return cfg, nil
}

// encodingName is e as SHOAL_COMPRESSION spells it.
func encodingName(e pb.Encoding) string {
	switch e {
	case pb.Encoding_FLOAT16:
		return "fp16"
	case pb.Encoding_BFLOAT16:
		return "bf16"
	case pb.Encoding_INT8:
		return "int8"
	}
	return "none"
}

// WriteModel writes the model's layout and initial values where the
// shards wait for them (ps.WriteModelFile).
func WriteModel(path string, layout nn.Layout, values []float32) error {
	return ps.WriteModelFile(path, layout, values)
}

// Session is one worker's connection to the shards. Its methods are
// called one at a time.
type Session struct {
	cfg      Config
	c        *client.Client
	strategy worker.Strategy
	sync     *worker.Sync
	async    *worker.Async
	n        int
	step     int64
	start    int64
}

// Open dials the shards, checks that they serve layout (every rank must
// build the same model) in cfg.Mode for cfg.Size workers, and joins the
// run.
func Open(ctx context.Context, cfg Config, layout nn.Layout) (*Session, error) {
	if cfg.Mode == consistency.Ring {
		return nil, errors.New("tensorps: mode ring has no parameter servers")
	}
	if len(cfg.Servers) == 0 {
		return nil, errors.New("tensorps: no servers")
	}
	for _, a := range cfg.Servers {
		if err := cfg.Creds.CheckDial(a); err != nil {
			return nil, err
		}
	}
	dctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	opts := []client.Option{client.WithCallTimeout(cfg.CallTimeout), client.WithPushEncoding(cfg.Encoding), client.WithDialOptions(cfg.Creds.DialOptions()...)}
	if cfg.Notice != nil {
		opts = append(opts, client.WithConnectNotice(2*time.Second, cfg.Notice))
	}
	c, err := client.Dial(dctx, cfg.Servers, opts...)
	if err != nil {
		return nil, fmt.Errorf("rank %d: connecting to the parameter servers %s: %w", cfg.Rank, strings.Join(cfg.Servers, ","), err)
	}
	s := &Session{cfg: cfg, c: c, n: layout.Size()}
	if err := s.check(layout); err != nil {
		c.Close()
		return nil, err
	}
	if s.start, err = psclient.Join(ctx, c, cfg.Rank, 1, cfg.ConnectTimeout); err != nil {
		c.Close()
		return nil, fmt.Errorf("rank %d: joining the parameter servers: %w", cfg.Rank, err)
	}
	s.step = s.start
	shards := c.Info().Plan.Servers
	if cfg.Mode == consistency.Sync {
		s.sync = worker.NewSync(psclient.New(c), int64(cfg.Rank), shards)
		s.sync.StartAt(s.start)
		s.strategy = s.sync
	} else {
		if s.async, err = worker.NewAsync(psclient.New(c), s.n, shards, worker.AsyncConfig{WorkerID: int64(cfg.Rank)}); err != nil {
			c.Close()
			return nil, err
		}
		s.strategy = s.async
	}
	return s, nil
}

// check refuses shards that hold another model, run another mode or
// expect another number of workers.
func (s *Session) check(layout nn.Layout) error {
	info := s.c.Info()
	var theirs nn.Layout
	for _, t := range info.Tensors {
		theirs.Tensors = append(theirs.Tensors, nn.Tensor{Name: t.Name, Shape: t.Shape, Offset: t.Offset})
	}
	switch {
	case !theirs.Equal(layout):
		return fmt.Errorf("rank %d: the parameter servers hold a model of %d tensors and %d floats (%s), this rank's has %d tensors and %d floats (%s): every rank must build the same model",
			s.cfg.Rank, len(theirs.Tensors), theirs.Size(), firstTensors(theirs), len(layout.Tensors), layout.Size(), firstTensors(layout))
	case info.Mode != s.cfg.Mode:
		return fmt.Errorf("rank %d: mode %s, but the parameter servers run mode %s", s.cfg.Rank, s.cfg.Mode, info.Mode)
	case info.Mode != consistency.Async && info.Workers != s.cfg.Size:
		return fmt.Errorf("rank %d of %d: the parameter servers expect %d workers", s.cfg.Rank, s.cfg.Size, info.Workers)
	case info.LocalSteps != s.cfg.LocalSteps:
		return fmt.Errorf("rank %d: %s, but the parameter servers run with --local-steps %d: the ranks and the shards must agree on how many steps a push holds (shoal run --local-steps sets both)",
			s.cfg.Rank, localStepsWords(s.cfg.LocalSteps), info.LocalSteps)
	}
	return nil
}

// localStepsWords says what a rank's SHOAL_LOCAL_STEPS means.
func localStepsWords(h int) string {
	if h == 0 {
		return "this rank pushes every step (no SHOAL_LOCAL_STEPS)"
	}
	return fmt.Sprintf("this rank pushes every %d steps (SHOAL_LOCAL_STEPS=%d)", h, h)
}

// firstTensors names a layout's first tensors and their shapes.
func firstTensors(l nn.Layout) string {
	var parts []string
	for i, t := range l.Tensors {
		if i == 3 {
			parts = append(parts, "...")
			break
		}
		parts = append(parts, fmt.Sprintf("%s %v", t.Name, t.Shape))
	}
	return strings.Join(parts, ", ")
}

// Len is the number of floats in the vector.
func (s *Session) Len() int { return s.n }

// Step is the step the next Push is for.
func (s *Session) Step() int64 { return s.step }

// Params writes the weights of the current step into dst (len Len): the
// first pull, or the one after a Push, which usually brought them in the
// same round trip already.
func (s *Session) Params(ctx context.Context, dst []float32) error {
	if len(dst) != s.n {
		return fmt.Errorf("tensorps: %d floats, the model has %d", len(dst), s.n)
	}
	if err := s.strategy.Params(ctx, s.step, dst); err != nil {
		return fmt.Errorf("rank %d, step %d: pulling the weights: %w", s.cfg.Rank, s.step, err)
	}
	return nil
}

// Push hands over the current step's vector (the servers apply it with
// their optimizer) and writes the weights of the next step into dst.
func (s *Session) Push(ctx context.Context, grads, dst []float32) error {
	if len(grads) != s.n || len(dst) != s.n {
		return fmt.Errorf("tensorps: %d and %d floats, the model has %d", len(grads), len(dst), s.n)
	}
	if err := s.strategy.Apply(ctx, s.step, dst, grads); err != nil {
		return fmt.Errorf("rank %d, step %d: pushing: %w", s.cfg.Rank, s.step, err)
	}
	s.step++
	return s.Params(ctx, dst)
}

// Stats is what the session saw.
type Stats struct {
	// Steps pushed, and the step the servers let this worker begin at.
	Steps, StartStep int64
	// Dropped: sync pushes dropped as a backup worker's late gradient.
	Dropped int64
	// Staleness counts async and SSP pushes by the largest staleness any
	// shard saw.
	Staleness consistency.Staleness
}

// Stats says what the session saw so far.
func (s *Session) Stats() Stats {
	st := Stats{Steps: s.step - s.start, StartStep: s.start}
	if s.sync != nil {
		st.Dropped = s.sync.Dropped
	}
	if s.async != nil {
		st.Staleness = s.async.Staleness
	}
	return st
}

// Close sends what is pending and closes the connections.
func (s *Session) Close(ctx context.Context) error {
	err := s.strategy.Finish(ctx)
	if cerr := s.c.Close(); err == nil {
		err = cerr
	}
	return err
}
