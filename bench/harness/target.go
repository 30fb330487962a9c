package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/sim"
)

// targetJob predicts the time to a test accuracy: each mode's fastest
// simulated setup is emulated (package emulate) for its accuracy against
// epochs, and the epochs to the target are timed at the setup's
// simulated samples/s. The ring trains as sync does (the mean of N
// gradients applied once a step), so it is emulated as sync.
type targetJob struct {
	cfg PlanConfig
}

// TargetRow is one mode's prediction, as --json prints it.
type TargetRow struct {
	Mode    string `json:"mode"`
	Servers int    `json:"servers"`
	// Update is the shards' update rule (async and SSP).
	Update string  `json:"update_rule,omitempty"`
	Target float64 `json:"target_accuracy"`
	// Epochs and Seconds to the target; both 0 when the job did not get
	// there in the epochs emulated (Final says how close it came).
	Epochs   float64 `json:"epochs_to_target"`
	Seconds  float64 `json:"seconds_to_target"`
	Final    float64 `json:"final_accuracy"`
	Diverged string  `json:"diverged,omitempty"`
	// LocalSteps is the setup's H (DiLoCo), 0 without.
	LocalSteps int `json:"local_steps,omitempty"`
}

func (j targetJob) run(ctx context.Context, base sim.Config, rows []PlanRow, stdout io.Writer) error {
	e, err := j.cfg.NewJob()
	if err != nil {
		return err
	}
	fastest, order := fastestPerMode(rows)
	if !j.cfg.JSON {
		fmt.Fprintf(stdout, "time to %.1f%% test accuracy on %s (emulated, %d epochs at most, %s lr %g, %s decay):\n",
			100*j.cfg.Target, e.Test.Name(), j.cfg.Epochs, e.Optimizer.Algorithm, e.Optimizer.LR, e.Decay)
	}
	var results []TargetRow
	for _, mode := range order {
		row, updates, err := j.predict(ctx, e, base, fastest[mode])
		if err != nil {
			return err
		}
		results = append(results, row)
		if j.cfg.JSON {
			if err := json.NewEncoder(stdout).Encode(row); err != nil {
				return err
			}
			continue
		}
		j.printRow(stdout, row, updates)
	}
	if !j.cfg.JSON {
		j.printFirst(stdout, results)
	}
	return nil
}

// fastestPerMode is each mode's row of the most samples/s, and the modes
// in the order rows has them.
func fastestPerMode(rows []PlanRow) (map[string]PlanRow, []string) {
	fastest := map[string]PlanRow{}
	var order []string
	for _, r := range rows {
		if b, ok := fastest[r.Mode]; !ok || r.Result.SamplesPerSec > b.Result.SamplesPerSec {
			if !ok {
				order = append(order, r.Mode)
			}
			fastest[r.Mode] = r
		}
	}
	return fastest, order
}

// predict emulates r's setup (the ring as sync; a local-steps setup with
// its H, the job's optimizer as the workers' inner one and Job.Outer the
// shards') and times its epochs to the target at r's simulated
// samples/s. It also returns the updates the emulated job applied.
func (j targetJob) predict(ctx context.Context, e Job, base sim.Config, r PlanRow) (TargetRow, int64, error) {
	name := r.Mode
	if r.LocalSteps > 0 {
		name, _, _ = strings.Cut(name, "-") // sync-h10: sync
		e.LocalSteps = r.LocalSteps
	}
	m, err := consistency.Parse(name)
	if err != nil {
		return TargetRow{}, 0, err
	}
	sc := base
	sc.Mode, sc.Servers, sc.Colocated = m, max(r.Servers, 1), r.Colocated
	if sc.Mode == consistency.Ring {
		sc.Mode = consistency.Sync
	}
	res, err := e.Run(ctx, sc)
	if err != nil {
		return TargetRow{}, 0, fmt.Errorf("--target: emulating %s: %w", r.Mode, err)
	}
	row := TargetRow{Mode: r.Mode, Servers: r.Servers, Update: ruleLabel(e, sc), Target: j.cfg.Target, Final: res.Final.Accuracy, Diverged: res.Diverged, LocalSteps: r.LocalSteps}
	for _, p := range res.Curve {
		if p.Accuracy >= j.cfg.Target {
			row.Epochs = p.Epochs
			row.Seconds = p.Epochs * float64(e.Train.Len()) / r.Result.SamplesPerSec
			break
		}
	}
	return row, res.Updates, nil
}

// printRow prints one mode's prediction: its epochs and time to the
// target, or that it diverged (after updates updates), or how close it
// came.
func (j targetJob) printRow(stdout io.Writer, row TargetRow, updates int64) {
	w := j.cfg.modeWidth()
	switch {
	case row.Epochs > 0:
		fmt.Fprintf(stdout, "  %-*s %7s %-9s  %.2f epochs, %s\n", w, row.Mode, serversLabel(row.Servers), row.Update, row.Epochs, time.Duration(row.Seconds*float64(time.Second)).Round(time.Millisecond))
	case row.Diverged != "":
		hint := "the update rule full and dcasgd apply each push at the full rate: try --update-rule staleness, or a lower --lr"
		if row.LocalSteps > 0 {
			hint = "outer momentum on each pseudo-gradient as it arrives diverges in async: try --outer-optimizer delayed-nesterov --outer-momentum 0.5, or sgd"
		}
		fmt.Fprintf(stdout, "  %-*s %7s %-9s  never: diverged after %d updates (%s)\n", w, row.Mode, serversLabel(row.Servers), row.Update, updates, hint)
	default:
		fmt.Fprintf(stdout, "  %-*s %7s %-9s  not in %d epochs (%.2f%% at the end)\n", w, row.Mode, serversLabel(row.Servers), row.Update, j.cfg.Epochs, 100*row.Final)
	}
}

// printFirst names the mode first to the target, and how much sooner it
// gets there than the next.
func (j targetJob) printFirst(stdout io.Writer, results []TargetRow) {
	best := soonest(results, nil)
	if best == nil {
		fmt.Fprintf(stdout, "first to %.1f%%: none within %d epochs\n", 100*j.cfg.Target, j.cfg.Epochs)
		return
	}
	fmt.Fprintf(stdout, "first to %.1f%%: %s%s", 100*j.cfg.Target, best.Mode, withServers(best.Servers))
	if next := soonest(results, best); next != nil {
		fmt.Fprintf(stdout, ", %.2f× sooner than %s%s", next.Seconds/best.Seconds, next.Mode, withServers(next.Servers))
	}
	fmt.Fprintln(stdout)
}

// soonest is the row of results that got to the target soonest, other
// than but; nil when none did.
func soonest(results []TargetRow, but *TargetRow) *TargetRow {
	var best *TargetRow
	for i := range results {
		if r := &results[i]; r != but && r.Epochs > 0 && (best == nil || r.Seconds < best.Seconds) {
			best = r
		}
	}
	return best
}
