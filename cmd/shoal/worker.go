package main

import (
	"context"
	"fmt"
	"io"

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/flags"
	"github.com/shoalml/shoal/node"
)

const workerSynopsis = "Runs one training worker: it pulls weights from the parameter servers, computes\ngradients on its shard of the data and pushes them back. Its rank and the world\nsize come from --rank/--world-size, else SHOAL_RANK/SHOAL_WORLD_SIZE, Open MPI,\nSlurm or torchrun environment variables."

func runWorker(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) (err error) {
	fs := flags.NewFlagSet("worker", workerSynopsis, stderr)
	var w flags.Worker
	w.Register(fs)
	if err := flags.Parse(fs, args); err != nil {
		return err
	}
	cfg, closeModel, err := w.Config(stderr)
	if err != nil {
		return err
	}
	defer closeModel()
	cfg.Progress = progressTo(stdout, w.Events)
	if cfg.Timeline, err = w.Timeline.Open(fmt.Sprintf("worker %d", cfg.ID.Rank), "steps", "allreduce (overlapping backward)"); err != nil {
		return err
	}
	defer closeTimeline(cfg.Timeline, &err)
	if w.Train.Mode != consistency.Ring {
		if err := w.Sec.CheckDial(cfg.PS.Servers); err != nil {
			return err
		}
	}
	return node.RunWorker(ctx, cfg, stdin, stdout)
}
