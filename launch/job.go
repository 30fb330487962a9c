package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/shoalml/shoal/internal/lockedio"
)

// JobConfig is one local job: Servers server processes (started one after
// the other, each waited for until it listens), then Workers worker
// processes, all of them children of Exe. The job owns its children: it
// watches them until every worker has exited, restarts a server killed
// from outside where MaxRestarts allows, and stops every child before
// RunJob returns.
//
// What a child is asked to do is the caller's: ServerArgs and WorkerArgs
// build each one's argv, WorkerEnv its environment. The hooks are called
// on RunJob's goroutine, one at a time.
//
// The workers may instead run a program of their own (WorkerExe), which
// need not speak the events protocol: shoal run's ranks.
type JobConfig struct {
	// Exe is the binary every child runs (usually this one,
	// os.Executable), but for WorkerExe's workers.
	Exe string
	// WorkerExe, if set, is the program the workers run instead of Exe,
	// with WorkerArgs as its arguments (Launcher.StartProgram): each
	// line of its output is passed through, prefixed with the rank
	// ("[1]<stderr>:"), its stdout to Stdout, rather than read as
	// events; the workers are named "rank 0", "rank 1", ...
	WorkerExe string
	// Name prefixes what the job prints on Stderr itself (the failures
	// of workers the others finished without), e.g. "shoal train".
	Name string
	// Stdout gets the job's running lines (epochs, membership changes,
	// restarts, metrics addresses); Stderr the children's stderr, each
	// line prefixed with the child's name, and their deaths.
	Stdout, Stderr io.Writer
	// TTY: Stdout is a terminal, where the board redraws a progress bar.
	TTY bool
	// StartupTimeout bounds how long a server (or the rendezvous) may take
	// to listen.
	StartupTimeout time.Duration

	// Servers is how many servers run, 0 for none; ServerRole names
	// them ("ps": "ps 0", "ps 1", ...) in what the job prints and in
	// the membership events of their restarts.
	Servers    int
	ServerRole string
	// ServerArgs is server shard's argv: listening on listen, joining the
	// gossip cluster through join (none for the first), restart the times
	// it was restarted before.
	ServerArgs func(shard int, listen string, join []string, restart int) []string
	// MaxRestarts is how often a server killed by a signal is started
	// again, on its address, joining the others (0: never; a server's
	// death then ends the job).
	MaxRestarts int

	// Workers is how many workers ("worker 0", ...) run; at least 1.
	Workers int
	// WorkerArgs is rank's argv, given the servers' addresses, the gossip
	// addresses to join (the servers', or rank 0's in an elastic ring) and
	// the rendezvous (Rendezvous: rank 0's, "127.0.0.1:0" for rank 0).
	WorkerArgs func(rank int, servers, gossip []string, rendezvous string) []string
	// WorkerEnv is what rank's environment adds to this process's,
	// given the servers' addresses (nil: nothing).
	WorkerEnv func(rank int, servers []string) []string
	// Rendezvous: the workers form a ring. Rank 0 starts first and
	// serves the rendezvous the others join; every rank must finish (one
	// failure fails the job); the ranks agree among themselves when to
	// stop; the first done event carries the test metrics.
	Rendezvous bool
	// GroupSize, when above 1 (and without Rendezvous), groups the
	// workers GroupSize ranks in a row (per-host aggregation's hosts):
	// each group's first rank starts first and serves a rendezvous, whose
	// address (its first listening event's) WorkerArgs gets as the
	// rendezvous of the group's other ranks ("127.0.0.1:0" for the
	// first).
	GroupSize int
	// Elastic: a ring rank killed from outside is a membership change the
	// others go on after, as a worker killed in the parameter-server modes
	// always is.
	Elastic bool
	// Stats: summarise the workers' step logs (Tally.SummariseSteps).
	Stats bool
	// FailFast: the first worker to fail (to exit with an error it was
	// not asked for) ends the job at once: RunJob stops every other
	// child and returns a *RankError naming it, as horovodrun does.
	FailFast bool
	// StopGrace is how long a child asked to stop has to exit after its
	// SIGTERM before SIGKILL ends it (0: DefaultStopGrace).
	StopGrace time.Duration

	// Result is the job's summary begun with what its flags say; the
	// workers' events complete it.
	Result Result

	// ServersUp, if set, is called once every server serves, before the
	// first worker starts (shoal train prints its header there).
	ServersUp func()
	// Finish, if set, is called once every worker has exited, the summary
	// complete, while the servers still serve (shoal train reads the
	// final weights there).
	Finish func(ctx context.Context, j *JobResult) error
	// Started, if set, is told of every child the job starts.
	Started func(*Child)
	// Observe, if set, sees every message of the running job before the
	// job acts on it.
	Observe func(Message)
}

// DefaultJobConfig is a job of exe with one worker and no server, its
// running lines on stdout and its children's stderr on stderr; the caller
// sets the children's argv (WorkerArgs, and ServerArgs with Servers).
func DefaultJobConfig(exe string, stdout, stderr io.Writer) JobConfig {
	return JobConfig{Exe: exe, Name: "shoal", Stdout: stdout, Stderr: stderr, StartupTimeout: time.Minute, ServerRole: "ps", Workers: 1,
		Result: Result{FailedWorkers: []int{}, MembershipEvents: []MembershipEvent{}}}
}

// JobResult is what a job's run learnt.
type JobResult struct {
	// Result is the job's summary.
	Result Result
	// Servers are the servers' addresses, shard order.
	Servers []string
	// RingTest is a ring's first done event (its test metrics), nil
	// elsewhere or where no rank finished.
	RingTest *Event
	// Failures are the workers that failed, each with its last words; the
	// others finished without them.
	Failures []string
}

// RankError is the failure of a worker that ended a FailFast job: how
// rank Rank's process ended.
type RankError struct {
	Rank int
	// Status is its exit status, -1 where a signal ended it.
	Status int
	// Signal is the signal that ended it, 0 where it exited.
	Signal syscall.Signal
	// Err is its process's error (an *exec.ExitError where it ran).
	Err error
}

func newRankError(c *Child) *RankError {
	e := &RankError{Rank: c.Rank(), Status: -1, Err: c.Err()}
	var ee *exec.ExitError
	if errors.As(c.Err(), &ee) {
		e.Status = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			e.Signal = ws.Signal()
		}
	}
	return e
}

// Error says how the rank ended: "rank 1 exited with status 3".
func (e *RankError) Error() string {
	switch {
	case e.Signal != 0:
		return fmt.Sprintf("rank %d was killed by signal %d (%v)", e.Rank, int(e.Signal), e.Signal)
	case e.Status >= 0:
		return fmt.Sprintf("rank %d exited with status %d", e.Rank, e.Status)
	}
	return fmt.Sprintf("rank %d failed: %v", e.Rank, e.Err)
}

func (e *RankError) Unwrap() error { return e.Err }

// ExitCode is the status a launcher exits with to pass the rank's end on:
// its exit status, or 128 plus the signal's number as a shell reports
// one, else 1.
func (e *RankError) ExitCode() int {
	switch {
	case e.Signal != 0:
		return 128 + int(e.Signal)
	case e.Status > 0 && e.Status < 256:
		return e.Status
	}
	return 1
}

// validate checks cfg before anything starts.
func (cfg *JobConfig) validate() error {
	switch {
	case cfg.Exe == "" && (cfg.WorkerExe == "" || cfg.Servers > 0):
		return errors.New("launch: a job needs the binary its children run")
	case cfg.Workers < 1:
		return fmt.Errorf("launch: %d workers, want >= 1", cfg.Workers)
	case cfg.Servers > 0 && cfg.ServerRole == "":
		return errors.New("launch: a job's servers need a role to be named by")
	case cfg.WorkerArgs == nil || (cfg.Servers > 0 && cfg.ServerArgs == nil):
		return errors.New("launch: a job needs its children's argv")
	case cfg.StartupTimeout <= 0:
		return fmt.Errorf("launch: startup timeout %v, want > 0", cfg.StartupTimeout)
	case cfg.GroupSize < 0 || cfg.GroupSize > 1 && cfg.Workers%cfg.GroupSize != 0:
		return fmt.Errorf("launch: %d workers in groups of %d: want groups of 0 or more that divide the workers", cfg.Workers, cfg.GroupSize)
	case cfg.Stdout == nil || cfg.Stderr == nil:
		return errors.New("launch: a job needs its stdout and stderr")
	}
	return nil
}

// RunJob runs the job cfg to its end: every worker exited (and Finish
// done). It returns an error where the job could not finish: a server or
// the rendezvous that did not start, a server's death, a ring rank's
// failure, every worker failed, or ctx ended ("interrupted"). A child's
// death while the job waits for a server (or the rendezvous) to listen,
// a restarted server's included, ends the job too: Launcher.WaitFor
// reports it. A worker's failure the others finished without is not an
// error: it is in JobResult.Failures.
func RunJob(ctx context.Context, cfg JobConfig) (*JobResult, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	// The workers' passed-through output shares Stdout with the job's
	// own lines.
	cfg.Stdout = &lockedio.Writer{W: cfg.Stdout}
	l := New(cfg.Exe, cfg.Stderr)
	l.SetStopGrace(cfg.StopGrace)
	defer l.Shutdown()
	j := &job{cfg: &cfg, l: l, tally: &Tally{Result: cfg.Result}, board: NewBoard(cfg.Stdout, cfg.Workers, cfg.TTY),
		isWorker: map[*Child]bool{}, cause: map[int]string{}, done: map[int]bool{}}
	if err := j.startServers(ctx); err != nil {
		return nil, err
	}
	if cfg.ServersUp != nil {
		cfg.ServersUp()
	}
	j.start = time.Now()
	if err := j.startWorkers(ctx); err != nil {
		return nil, err
	}
	if err := j.watch(ctx); err != nil {
		return nil, err
	}
	res, err := j.summarise(ctx)
	if err != nil {
		return nil, err
	}
	if cfg.Finish != nil {
		if err := cfg.Finish(ctx, res); err != nil {
			return nil, err
		}
	}
	for _, s := range j.servers {
		s.child.Stop()
	}
	l.Shutdown()
	return res, nil
}

// job is one RunJob: its children and what watching them taught it.
type job struct {
	cfg      *JobConfig
	l        *Launcher
	tally    *Tally
	board    *Board
	start    time.Time // when the first worker started
	servers  []*server
	isWorker map[*Child]bool

	ringTest *Event         // ring: the first done event, with the test metrics
	failures []string       // the workers' failures, with their last words
	killed   []string       // the workers killed from outside (a membership change)
	cause    map[int]string // rank → how its process ended
	peers    []string       // gossip addresses, for a restarted server to join
	done     map[int]bool   // ranks that finished their run
}

// server is one server process of a job.
type server struct {
	idx      int
	addr     string // where it serves
	gossip   string // its membership address, if any
	child    *Child
	restarts int
}

func listening(e Event) bool { return e.Event == Listening }

// startServers starts the servers one after the other, each on a free
// loopback port, each joining the gossip of the first.
func (j *job) startServers(ctx context.Context) error {
	for i := range j.cfg.Servers {
		s := &server{idx: i}
		if err := j.startServer(ctx, s, "127.0.0.1:0", j.peers[:min(len(j.peers), 1)]); err != nil {
			return err
		}
		j.servers = append(j.servers, s)
		j.peers = append(j.peers, s.gossip)
	}
	return nil
}

// startServer starts server s listening on listen, joining the gossip
// cluster through join, and waits until it serves.
func (j *job) startServer(ctx context.Context, s *server, listen string, join []string) error {
	c, err := j.l.Start(ctx, fmt.Sprintf("%s %d", j.cfg.ServerRole, s.idx), s.idx, nil, j.cfg.ServerArgs(s.idx, listen, join, s.restarts)...)
	if err != nil {
		return err
	}
	j.started(c)
	ev, err := j.l.WaitFor(ctx, c, j.cfg.StartupTimeout, listening)
	if err != nil {
		return err
	}
	s.addr, s.gossip, s.child = ev.Addr, ev.Gossip, c
	return nil
}

func (j *job) started(c *Child) {
	if j.cfg.Started != nil {
		j.cfg.Started(c)
	}
}

// addrs are the servers' addresses, shard order.
func (j *job) addrs() []string {
	addrs := make([]string, len(j.servers))
	for i, s := range j.servers {
		addrs[i] = s.addr
	}
	return addrs
}

// startWorkers starts the workers; with a rendezvous rank 0 first, whose
// rendezvous address (and gossip) the others join.
func (j *job) startWorkers(ctx context.Context) error {
	rendezvous, gossip := "127.0.0.1:0", []string(nil)
	if !j.cfg.Rendezvous {
		gossip = slices.Clone(j.peers)
	}
	for r := range j.cfg.Workers {
		var env []string
		if j.cfg.WorkerEnv != nil {
			env = j.cfg.WorkerEnv(r, j.addrs())
		}
		args := j.cfg.WorkerArgs(r, j.addrs(), gossip, rendezvous)
		var c *Child
		var err error
		if j.cfg.WorkerExe != "" {
			c, err = j.l.StartProgram(ctx, fmt.Sprintf("rank %d", r), r, env, j.cfg.Stdout, append([]string{j.cfg.WorkerExe}, args...)...)
		} else {
			c, err = j.l.Start(ctx, fmt.Sprintf("worker %d", r), r, env, args...)
		}
		if err != nil {
			return err
		}
		j.started(c)
		j.isWorker[c] = true
		if j.cfg.Rendezvous && r == 0 {
			ev, err := j.l.WaitFor(ctx, c, j.cfg.StartupTimeout, listening)
			if err != nil {
				return err
			}
			rendezvous = ev.Addr
			if ev.Gossip != "" {
				gossip = []string{ev.Gossip}
			}
		}
		if g := j.cfg.GroupSize; g > 1 && !j.cfg.Rendezvous {
			switch {
			case r%g == 0: // the group's first rank: its rendezvous for the others
				ev, err := j.l.WaitFor(ctx, c, j.cfg.StartupTimeout, listening)
				if err != nil {
					return err
				}
				rendezvous = ev.Addr
			case r%g == g-1: // the next group's first rank serves its own
				rendezvous = "127.0.0.1:0"
			}
		}
	}
	return nil
}

// watch follows the job until every worker has exited: progress to the
// board, evaluations and done events to the tally, a worker's failure
// noted, a server's death the end of the job unless it is restarted.
// Shard 0 reports the workers' membership changes; outside a ring a
// worker that dies does not end the job, the others go on without it.
// When rank 0 stops at its target accuracy, the other workers are told to
// stop (ring ranks agree among themselves).
func (j *job) watch(ctx context.Context) error {
	for running := j.cfg.Workers; running > 0; {
		m, err := j.l.Next(ctx)
		if err != nil {
			return fmt.Errorf("interrupted: %w", err)
		}
		if j.cfg.Observe != nil {
			j.cfg.Observe(m)
		}
		switch {
		case m.Exit && j.isWorker[m.From] && j.cfg.FailFast && m.From.Died():
			return newRankError(m.From) // RunJob's Shutdown stops the others
		case m.Exit && j.isWorker[m.From]:
			running--
			j.workerExited(m.From)
		case m.Exit:
			if err := j.serverExited(ctx, m.From); err != nil {
				return err
			}
		case m.Event.Event == Listening && m.Event.Gossip != "":
			j.peers = append(j.peers, m.Event.Gossip)
		case m.Event.Event == Metrics:
			j.board.ClearBar()
			fmt.Fprintf(j.cfg.Stdout, "metrics: %s at http://%s/metrics\n", m.From.Name(), m.Event.Addr)
		case m.Event.Event == Progress:
			j.board.Update(ProgressOf(m.Event))
		case m.Event.Event == Member:
			j.memberChanged(m.Event)
		default:
			j.tallied(m.Event)
		}
	}
	return nil
}

// workerExited notes a worker's exit: a failure, or where it was killed
// from outside and the job can go on without it, a membership change.
func (j *job) workerExited(c *Child) {
	if c.Err() == nil {
		return
	}
	j.tally.Result.FailedWorkers = append(j.tally.Result.FailedWorkers, c.Rank())
	j.board.MarkDead(c.Rank())
	j.cause[c.Rank()] = c.Err().Error()
	if c.Signal() != "" && (!j.cfg.Rendezvous || j.cfg.Elastic) {
		// Killed from outside: a membership change the others go on
		// after, reported when shard 0 sees it.
		j.board.ClearBar()
		fmt.Fprintf(j.cfg.Stdout, "%s was killed (%v)\n", c.Name(), c.Err())
		j.killed = append(j.killed, fmt.Sprintf("%s was killed (%v)", c.Name(), c.Err()))
	} else {
		j.failures = append(j.failures, c.Failure())
	}
}

// serverExited restarts a server that was killed, where MaxRestarts
// allows; any other server's exit ends the job (the error).
func (j *job) serverExited(ctx context.Context, c *Child) error {
	if r := c.Rank(); r < len(j.servers) && j.servers[r].child == c && j.restartable(ctx, j.servers[r]) {
		s := j.servers[r]
		if err := j.restartServer(ctx, s); err != nil {
			return err
		}
		j.peers = append(j.peers, s.gossip)
		me := MembershipEvent{Role: j.cfg.ServerRole, Rank: s.idx, Change: "restarted", Seconds: time.Since(j.start).Seconds(), Cause: c.Err().Error()}
		j.tally.Result.MembershipEvents = append(j.tally.Result.MembershipEvents, me)
		j.board.ClearBar()
		fmt.Fprintf(j.cfg.Stdout, "%s was killed (%v); restarted from its checkpoint on %s\n", c.Name(), c.Err(), s.addr)
		return nil
	}
	// A server died: nothing can finish without it.
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return errors.New(c.Failure())
}

// restartable says whether the job starts a dead server again: killed
// from outside (not a failure of its own), at most MaxRestarts times.
func (j *job) restartable(ctx context.Context, s *server) bool {
	return ctx.Err() == nil && s.child.Signal() != "" && s.restarts < j.cfg.MaxRestarts
}

// restartServer starts a killed server again on its address, joining the
// gossip of everyone else.
func (j *job) restartServer(ctx context.Context, s *server) error {
	cause := s.child.Err()
	join := slices.DeleteFunc(slices.Clone(j.peers), func(p string) bool { return p == s.gossip })
	s.restarts++
	if err := j.startServer(ctx, s, s.addr, join); err != nil {
		return fmt.Errorf("%s %d was killed (%v) and could not be restarted: %w", j.cfg.ServerRole, s.idx, cause, err)
	}
	return nil
}

// memberChanged notes and prints a change of the workers' membership that
// shard 0 reports, but for a worker's joining and its leaving at the end
// of its run.
func (j *job) memberChanged(e Event) {
	if e.Change == "joined" || (e.Change == "left" && j.done[e.Rank]) {
		return // the run's start and its end are not changes
	}
	me := MembershipEvent{Role: e.Role, Rank: e.Rank, Change: e.Change, Step: e.Steps, Live: e.Live,
		Seconds: time.Since(j.start).Seconds(), Cause: j.cause[e.Rank]}
	if e.Change == Reformed {
		me.Cause = e.Reason // the ring's, not a rank's
	}
	j.tally.Result.MembershipEvents = append(j.tally.Result.MembershipEvents, me)
	j.board.ClearBar()
	fmt.Fprintln(j.cfg.Stdout, me.String())
}

// tallied adds an event to the tally; a done event also marks its rank
// done, is a ring's test metrics if it is the first, and, from rank 0
// stopped at its target accuracy outside a ring, tells the other workers
// to stop.
func (j *job) tallied(e Event) {
	j.tally.Add(e)
	if e.Event != Done {
		return
	}
	j.done[e.Rank] = true
	if e.CPUs != "" && e.Rank < j.cfg.Workers {
		cpus := &j.tally.Result.CPUs
		if *cpus == nil {
			*cpus = make([]string, j.cfg.Workers)
		}
		(*cpus)[e.Rank] = e.CPUs
	}
	// The lanes as the workers resolved them (each asks for its machine's
	// choice, and none opens more than a server has chunks).
	j.tally.Result.Lanes = max(j.tally.Result.Lanes, e.Lanes)
	if j.cfg.Rendezvous && j.ringTest == nil {
		// Every rank evaluates the whole test set together and reports
		// the same metrics; the first will do (rank 0 may have died in
		// an elastic ring).
		j.ringTest = &e
	}
	if e.Stopped && e.Rank == 0 && !j.cfg.Rendezvous {
		for c := range j.isWorker {
			if c.Rank() != 0 {
				c.Tell("stop")
			}
		}
	}
}

// summarise ends the training part of the job once every worker has
// exited: it completes the summary (the training time, the last epoch's
// metrics, the throughput) and prints the failures of workers the others
// finished without. An interrupted job, a job whose every worker failed
// and a ring missing a rank are errors.
func (j *job) summarise(ctx context.Context) (*JobResult, error) {
	if j.cfg.Stats {
		j.tally.SummariseSteps()
	}
	j.board.ClearBar()
	sum := &j.tally.Result
	sum.TrainSeconds = time.Since(j.start).Seconds()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("interrupted: %w", err)
	}
	if len(sum.FailedWorkers) == j.cfg.Workers {
		if len(j.killed) > 0 { // a worker killed before it joined leaves the others waiting for it
			return nil, fmt.Errorf("every worker failed or was killed:\n%s", strings.Join(append(j.killed, j.failures...), "\n"))
		}
		return nil, fmt.Errorf("every worker failed:\n%s", strings.Join(j.failures, "\n"))
	}
	if j.cfg.Rendezvous && len(j.failures) > 0 {
		// A ring cannot finish without every rank.
		return nil, fmt.Errorf("the ring failed:\n%s", strings.Join(j.failures, "\n"))
	}
	for _, f := range j.failures {
		fmt.Fprintln(j.cfg.Stderr, j.cfg.Name+":", f)
	}
	sort.Ints(sum.FailedWorkers)
	if n := len(j.board.Epochs); n > 0 {
		sum.Epochs = j.board.Epochs[n-1].Epoch
		sum.TrainLoss, sum.TrainAccuracy = j.board.Epochs[n-1].Loss, j.board.Epochs[n-1].Accuracy
	}
	sum.SamplesPerSec = float64(sum.Samples) / sum.TrainSeconds
	return &JobResult{Result: *sum, Servers: j.addrs(), RingTest: j.ringTest, Failures: j.failures}, nil
}

// String is a membership change as shoal train prints it, e.g. "worker 2
// died at step 413 (signal: killed); 3 workers go on".
func (e MembershipEvent) String() string {
	s := fmt.Sprintf("%s %d %s at step %d", e.Role, e.Rank, e.Change, e.Step)
	if e.Change == Reformed {
		s = fmt.Sprintf("the %s re-formed with the same members at step %d", e.Role, e.Step)
	}
	if e.Cause != "" {
		s += " (" + e.Cause + ")"
	}
	if e.Live == 1 {
		return s + "; 1 worker goes on"
	}
	return fmt.Sprintf("%s; %d workers go on", s, e.Live)
}
