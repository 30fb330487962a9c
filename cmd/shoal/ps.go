package main

import (
	"context"
	"fmt"
	"io"

	"github.com/shoalml/shoal/flags"
	"github.com/shoalml/shoal/node"
)

const psSynopsis = "Runs one parameter-server shard: it holds its chunks of the model's parameter\nvector and applies the gradients workers push with a server-side optimizer."

func runPS(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	fs := flags.NewFlagSet("ps", psSynopsis, stderr)
	var p flags.PS
	p.Register(fs)
	if err := flags.Parse(fs, args); err != nil {
		return err
	}
	cfg, err := p.Config(stderr)
	if err != nil {
		return err
	}
	rows := []string{"optimizer"}
	for w := range min(cfg.PS.Workers, 256) {
		rows = append(rows, fmt.Sprintf("worker %d's calls", w))
	}
	if cfg.PS.Timeline, err = p.Timeline.Open(fmt.Sprintf("ps %d", cfg.PS.Shard), rows...); err != nil {
		return err
	}
	defer closeTimeline(cfg.PS.Timeline, &err)
	return node.RunShard(ctx, cfg, stdout)
}
