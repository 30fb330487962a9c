package psclient

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/shoalml/shoal/client"
	"github.com/shoalml/shoal/data"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/worker"
)

// Join joins worker rank, which pushes every pushEvery steps (0 is 1),
// to the servers' run through c, waiting up to timeout, and returns the
// step the servers say it begins at: 0 in a new run, later for a worker
// restarted into a run under way. c keeps the sessions the shards bind
// the worker id with and sends them with its pushes and pulls.
func Join(ctx context.Context, c *client.Client, rank, pushEvery int, timeout time.Duration) (int64, error) {
	jctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return c.JoinWorker(jctx, int64(rank), client.JoinPushEvery(max(pushEvery, 1)))
}

// Rejoining is how TrainRejoining trains a worker through the servers.
type Rejoining struct {
	// Client is the servers; the caller owns and closes it.
	Client *client.Client
	// JoinTimeout bounds each join (Join).
	JoinTimeout time.Duration
	// PushEvery is how many steps apart the worker pushes (Join).
	PushEvery int
	// Strategy makes a fresh strategy for each (re)join; it is called on
	// the caller's goroutine before each run.
	Strategy func() (worker.Strategy, error)
	// Logger is where the rejoins are logged; nil discards.
	Logger *slog.Logger
	// StepsPerClock is how many of the worker's steps one step of the
	// shards' clock is (worker.Local's H); 0 is 1.
	StepsPerClock int64
}

// TrainRejoining runs the worker's steps against the servers from
// cfg.StartStep to the end. A worker the shards dropped from their live
// set (sync and SSP: membership declared it dead while it was alive, say
// cut off from the network for longer than failure detection allows)
// joins again at the step the shards name and trains on from there; the
// steps it missed were taken without it. The result counts every sample
// it trained on. It starts no goroutine beyond the Worker's, which it
// closes.
func (r Rejoining) TrainRejoining(ctx context.Context, cfg worker.Config, model nn.Model, train data.Dataset) (worker.Result, error) {
	log := r.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	start := time.Now()
	var samples int64
	for joins := 0; ; joins++ {
		st, err := r.Strategy()
		if err != nil {
			return worker.Result{}, err
		}
		wk, err := worker.New(cfg, model, train, st)
		if err != nil {
			return worker.Result{}, err
		}
		res, err := wk.Run(ctx)
		wk.Close()
		samples += res.Samples
		if res.Samples = samples; joins > 0 {
			res.Elapsed = time.Since(start)
		}
		if err == nil || !client.NotMember(err) || ctx.Err() != nil {
			return res, err
		}
		log.Warn("the servers dropped this worker from their live set (membership declared it dead); joining again",
			"component", "worker", "rank", cfg.Rank, "step", res.Steps, "err", err)
		if cfg.StartStep, err = Join(ctx, r.Client, cfg.Rank, r.PushEvery, r.JoinTimeout); err != nil {
			return res, fmt.Errorf("joining the servers again after they dropped this worker: %w", err)
		}
		cfg.StartStep *= max(r.StepsPerClock, 1)
		log.Warn("joined again", "component", "worker", "rank", cfg.Rank, "step", cfg.StartStep, "missed", cfg.StartStep-res.Steps)
	}
}
