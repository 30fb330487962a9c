package node

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/shoalml/shoal/client"
	"github.com/shoalml/shoal/emulate"
	"github.com/shoalml/shoal/worker"
)

// writePushes writes the worker's recorded pushes to PS.RecordPushes,
// with the job they belong to (package emulate replays them).
func (w *psWorker) writePushes(info client.Info, cfg worker.Config, st psStrategy) error {
	if w.PS.RecordPushes == "" {
		return nil
	}
	rec := emulate.Recording{Rank: w.ID.Rank, WorldSize: w.ID.WorldSize, Mode: info.Mode, Staleness: info.Staleness, Servers: info.Plan.Servers,
		Floats: w.Model.Layout().Size(), Batch: w.Loop.Batch, Seed: w.Seed, StartStep: cfg.StartStep, Pushes: st.pushes()}
	if rec.Pushes == nil {
		rec.Pushes = []worker.PushRecord{}
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if err := os.WriteFile(w.PS.RecordPushes, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("--record-pushes: %w", err)
	}
	return nil
}
