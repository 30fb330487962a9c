package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/shoalml/shoal/bench"
	"github.com/shoalml/shoal/collective"
	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/sim"
)

// PlanRow is one simulated setup, as shoal bench plan --json prints it.
type PlanRow struct {
	Mode    string `json:"mode"`
	Servers int    `json:"servers"`
	// Allreduce is the ring mode's algorithm (ring, tree, auto,
	// hierarchical; "" in the
	// PS modes).
	Allreduce string `json:"allreduce,omitempty"`
	// Colocated: the servers run on the workers' hosts and share their
	// NICs (sim.Config.Colocated, BytePS's layout); the table's mode is
	// then "sync-colo".
	Colocated bool `json:"colocated,omitempty"`
	// LocalSteps is the setup's H (DiLoCo; its mode is then labelled
	// sync-hH or async-hH), 0 without.
	LocalSteps int        `json:"local_steps,omitempty"`
	Result     sim.Result `json:"result"`
}

// label is r's mode as the table prints it: the ring mode with its
// allreduce algorithm when that is not the ring's.
func (r PlanRow) label() string {
	switch {
	case r.Colocated:
		return r.Mode + "-colo"
	case r.Allreduce == "" || r.Allreduce == collective.Ring.String():
		return r.Mode
	}
	return r.Mode + "/" + r.Allreduce
}

// planAlgorithms are the ring mode's allreduce algorithms a plan
// simulates, each its own row; Hierarchical only on hosts of two or more
// ranks (Sim.RanksPerHost), where it differs from the ring.
var planAlgorithms = []collective.Algorithm{collective.Ring, collective.Tree, collective.Auto, collective.Hierarchical}

// PlanConfig is one shoal bench plan: the job to simulate in each mode
// and at each server count, and the time to a test accuracy to predict.
type PlanConfig struct {
	// Sim is the job, less its mode, servers and compute: Plan sets
	// Forward and Backward from Net.Compute (or the compute measured on
	// Model), and ApplyBytesPerSec, when 0, measured here.
	Sim sim.Config
	Net SimJob
	// Model builds the model to measure the compute on, when
	// Net.Compute is 0; ModelName describes it.
	Model     func() (nn.Model, error)
	ModelName string
	Modes     []consistency.Mode
	// ServerList is --servers ("": the default counts); Counts its
	// counts at Sim.Workers.
	ServerList string
	Counts     []int
	// Colocated are the server counts (each at most Sim.Workers) at
	// which every PS mode is simulated again with the servers on the
	// workers' hosts (sim.Config.Colocated), as the mode "sync-colo".
	Colocated []int
	JSON      bool
	// Plot, when not "", is the PNG of each mode's efficiency against
	// the worker count.
	Plot string
	// Target, when > 0, is the test accuracy whose time to reach is
	// predicted by emulating each mode's fastest setup (at most Epochs)
	// on the job that NewJob returns.
	Target float64
	Epochs int
	NewJob func() (Job, error)
	// LocalSteps, when > 0, adds to every sync and async setup the same
	// with that many local steps (DiLoCo, shoal train --local-steps), as
	// the mode "sync-hH" or "async-hH"; --target does not emulate them.
	LocalSteps int
	// Fragments and FragmentOverlap, with LocalSteps, make those setups
	// streaming fragments (sim.Config.Fragments), as "sync-hH-fF".
	Fragments, FragmentOverlap int
	// Hosts, with PerHost above 1, adds to every PS setup the same with
	// per-host aggregation (sim.RunHosts, shoal train --host-aggregate),
	// as the mode "sync-hostK"; --target does not emulate them.
	Hosts sim.Hosts
}

// floats is the model's size in float32s.
func (cfg PlanConfig) floats() int64 {
	var n int64
	for _, l := range cfg.Sim.Layers {
		n += l / 4
	}
	return n
}

// Plan simulates cfg's job in every mode at each server count and prints
// a table (or with JSON an object per setup), the fastest setup, the
// plot, and with a Target the predicted time to it.
func Plan(ctx context.Context, cfg PlanConfig, stdout io.Writer) error {
	base, c, err := cfg.simConfig(ctx)
	if err != nil {
		return err
	}
	floats := cfg.floats()
	if !cfg.JSON {
		fmt.Fprintf(stdout, "shoal bench plan: %s (%.1f MB), %d workers of batch %d, NICs of %g Gbit/s, latency %v; compute %.2f ms a step, optimizer %.2f GB/s; simulated, %d steps each\n",
			cfg.ModelName, float64(floats)*4/1e6, base.Workers, base.Batch, cfg.Net.NICGbps, cfg.Net.Latency, c*1e3, base.ApplyBytesPerSec/1e9, base.Steps)
		fmt.Fprintf(stdout, "%-*s %7s %10s %12s %10s %14s\n", cfg.modeWidth(), "mode", "servers", "step ms", "samples/s", "efficiency", "MB/worker/step")
	}
	rows, err := cfg.simulate(base, stdout)
	if err != nil {
		return err
	}
	if err := cfg.plot(base, stdout); err != nil {
		return err
	}
	tj := targetJob{cfg: cfg}
	if cfg.JSON || len(rows) == 0 {
		if cfg.Target > 0 && len(rows) > 0 {
			return tj.run(ctx, base, rows, stdout)
		}
		return nil
	}
	printFastest(stdout, rows)
	if cfg.Target == 0 {
		if slices.ContainsFunc(rows, func(r PlanRow) bool { return r.Mode == "async" || r.Mode == "ssp" }) {
			fmt.Fprint(stdout, "; async and ssp trade staleness for it (see sim's staleness), which this does not price in (--target does)")
		}
		fmt.Fprintln(stdout)
		return nil
	}
	fmt.Fprintln(stdout)
	return tj.run(ctx, base, rows, stdout)
}

// simConfig is the job to simulate, less its mode and servers, and its
// compute per step in seconds: Net.Compute and Sim.ApplyBytesPerSec, or
// else measured here.
func (cfg PlanConfig) simConfig(ctx context.Context) (sim.Config, float64, error) {
	c, err := cfg.Net.stepSeconds(ctx, cfg.Model, cfg.Sim.Batch)
	if err != nil {
		return sim.Config{}, 0, err
	}
	sc := cfg.Sim
	if sc.ApplyBytesPerSec == 0 {
		sc.ApplyBytesPerSec = sim.MeasureOptimizer(int(min(cfg.floats(), 1<<24)))
	}
	sc.Forward, sc.Backward = c/3, 2*c/3
	sc.Jitter, sc.Seed, sc.NICGbps, sc.Latency = cfg.Net.Jitter, cfg.Net.Seed, cfg.Net.NICGbps, cfg.Net.Latency.Seconds()
	sc.Pieces = sim.DefaultPieces // fewer, larger pieces: the answer within 5% (sim.TestCoarsePiecesKeepTheAnswer)
	return sc, c, nil
}

// simulate runs base in every mode at each of its server counts, the
// setups at once on the cores there are (each simulation is one
// goroutine's arithmetic), and prints each setup in order: a table row,
// or with JSON an object.
func (cfg PlanConfig) simulate(base sim.Config, stdout io.Writer) ([]PlanRow, error) {
	var rows []PlanRow
	var modes []consistency.Mode
	var algs []collective.Algorithm
	var locals []int
	hosted := map[int]bool{} // rows aggregated per host
	for _, m := range cfg.Modes {
		if !m.UsesServers() {
			for _, a := range planAlgorithms {
				if a == collective.Hierarchical && cfg.Sim.RanksPerHost < 2 {
					continue
				}
				rows, modes, algs, locals = append(rows, PlanRow{Mode: m.String(), Allreduce: a.String()}), append(modes, m), append(algs, a), append(locals, 0)
			}
			continue
		}
		for _, s := range cfg.Counts {
			if int64(s) > cfg.floats() {
				continue
			}
			rows, modes, algs, locals = append(rows, PlanRow{Mode: m.String(), Servers: s}), append(modes, m), append(algs, collective.Ring), append(locals, 0)
			if cfg.LocalSteps > 0 && (m == consistency.Sync || m == consistency.Async) {
				rows = append(rows, PlanRow{Mode: modeLabel(m, cfg.LocalSteps, cfg.Fragments), Servers: s, LocalSteps: cfg.LocalSteps})
				modes, algs, locals = append(modes, m), append(algs, collective.Ring), append(locals, cfg.LocalSteps)
			}
			if k := cfg.Hosts.PerHost; k > 1 && base.Workers%k == 0 && base.BackupWorkers < base.Workers/k {
				hosted[len(rows)] = true
				rows = append(rows, PlanRow{Mode: fmt.Sprintf("%s-host%d", m, k), Servers: s})
				modes, algs, locals = append(modes, m), append(algs, collective.Ring), append(locals, 0)
			}
		}
		// Beside them, the servers on the workers' hosts.
		for _, s := range cfg.Colocated {
			if s <= base.Workers && int64(s) <= cfg.floats() {
				rows = append(rows, PlanRow{Mode: m.String(), Servers: s, Colocated: true})
				modes, algs, locals = append(modes, m), append(algs, collective.Ring), append(locals, 0)
			}
		}
	}
	errs := make([]error, len(rows))
	eachAtOnce(len(rows), func(i int) {
		sc := base
		sc.Mode, sc.Servers, sc.Allreduce, sc.LocalSteps, sc.Colocated = modes[i], rows[i].Servers, algs[i], locals[i], rows[i].Colocated
		if locals[i] > 0 {
			sc.Fragments, sc.FragmentOverlap = cfg.Fragments, cfg.FragmentOverlap
		}
		if hosted[i] {
			rows[i].Result, errs[i] = sim.RunHosts(sc, cfg.Hosts)
		} else {
			rows[i].Result, errs[i] = sim.Run(sc)
		}
		if errs[i] != nil {
			errs[i] = fmt.Errorf("%s with %d servers: %w", rows[i].label(), rows[i].Servers, errs[i])
		}
	})
	for i, row := range rows {
		if errs[i] != nil {
			return nil, errs[i]
		}
		if err := cfg.print(stdout, row); err != nil {
			return nil, err
		}
	}
	return rows, nil
}

// modeWidth is the table's mode column: wider for the local steps' labels.
func (cfg PlanConfig) modeWidth() int {
	if cfg.Fragments > 1 {
		return 16
	}
	if cfg.LocalSteps > 0 || cfg.Hosts.PerHost > 1 || (len(cfg.Colocated) > 0 && slices.ContainsFunc(cfg.Modes, consistency.Mode.UsesServers)) {
		return 12
	}
	return 6
}

// modeLabel is a setup's mode in the table with its local steps h
// (h > 0) as "-hH", and its fragments f (f > 1) as "-fF".
func modeLabel(m consistency.Mode, h, f int) string {
	switch {
	case h > 0 && f > 1:
		return fmt.Sprintf("%s-h%d-f%d", m, h, f)
	case h > 0:
		return fmt.Sprintf("%s-h%d", m, h)
	}
	return m.String()
}

// eachAtOnce calls fn(0) to fn(n−1), as many at once as Go may run
// threads (GOMAXPROCS), and returns when every call has.
func eachAtOnce(n int, fn func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, runtime.GOMAXPROCS(0)) {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				fn(i)
			}
		})
	}
	wg.Wait()
}

// print prints one simulated setup: a table row, or with JSON an object.
func (cfg PlanConfig) print(stdout io.Writer, row PlanRow) error {
	if cfg.JSON {
		return json.NewEncoder(stdout).Encode(row)
	}
	r := row.Result
	fmt.Fprintf(stdout, "%-*s %7s %10.2f %12.0f %9.1f%% %14.2f\n", cfg.modeWidth(), row.label(), serversLabel(row.Servers), r.StepSeconds*1e3, r.SamplesPerSec, 100*r.Efficiency,
		(r.BytesSent+r.BytesReceived)/1e6)
	return nil
}

// printFastest names the fastest of rows and how much faster it is than
// the fastest setup of another mode, leaving the line open.
func printFastest(stdout io.Writer, rows []PlanRow) {
	best, second := rows[0], PlanRow{}
	for _, r := range rows[1:] {
		switch {
		case r.Result.SamplesPerSec > best.Result.SamplesPerSec:
			if r.Mode != best.Mode {
				second = best
			}
			best = r
		case r.Mode != best.Mode && r.Result.SamplesPerSec > second.Result.SamplesPerSec:
			second = r
		}
	}
	fmt.Fprintf(stdout, "fastest: %s%s, %.0f samples/s", best.label(), withServers(best.Servers), best.Result.SamplesPerSec)
	if second.Mode != "" {
		fmt.Fprintf(stdout, ", %.2f× the best other mode (%s%s)", best.Result.SamplesPerSec/second.Result.SamplesPerSec, second.label(), withServers(second.Servers))
	}
}

// plot writes cfg.Plot, when asked for: base simulated at 2, 4, 8, ...
// workers up to its own count, each mode at its best server count, its
// efficiency against workers.
func (cfg PlanConfig) plot(base sim.Config, stdout io.Writer) error {
	if cfg.Plot == "" {
		return nil
	}
	var ns []int
	for n := 2; n < base.Workers; n *= 2 {
		ns = append(ns, n)
	}
	ns = append(ns, base.Workers)
	var curves []bench.Curve
	for _, m := range cfg.Modes {
		c, err := cfg.efficiencyCurve(base, m, ns)
		if err != nil {
			return err
		}
		curves = append(curves, c)
	}
	lp := bench.LinePlot{Title: fmt.Sprintf("Simulated: scaling efficiency, %s at %g Gbit/s", cfg.ModelName, base.NICGbps),
		XLabel: "workers", YLabel: "scaling efficiency (%)", LogX: true, Curves: curves}
	if err := lp.Write(cfg.Plot); err != nil {
		return err
	}
	if !cfg.JSON {
		fmt.Fprintf(stdout, "wrote %s\n", cfg.Plot)
	}
	return nil
}

// efficiencyCurve is mode m's efficiency at each worker count of ns, at
// its best server count.
func (cfg PlanConfig) efficiencyCurve(base sim.Config, m consistency.Mode, ns []int) (bench.Curve, error) {
	c := bench.Curve{Label: m.String(), Mode: m.String()}
	if m == consistency.SSP {
		c.Label = fmt.Sprintf("ssp (s = %d)", base.Staleness)
	}
	if m.UsesServers() {
		c.Label += ", best server count"
	}
	for _, n := range ns {
		ss := []int{0}
		if m.UsesServers() {
			var err error
			if ss, err = ServerCounts(cfg.ServerList, n); err != nil {
				return c, err
			}
		}
		best := 0.0
		for _, s := range ss {
			if int64(s) > cfg.floats() {
				continue
			}
			sc := base
			sc.Mode, sc.Workers, sc.Servers, sc.BackupWorkers = m, n, s, min(base.BackupWorkers, n-1)
			r, err := sim.Run(sc)
			if err != nil {
				return c, fmt.Errorf("%s, %d workers, %d servers: %w", m, n, s, err)
			}
			best = max(best, r.Efficiency)
		}
		c.X, c.Y = append(c.X, float64(n)), append(c.Y, 100*best)
	}
	return c, nil
}

func serversLabel(s int) string {
	if s == 0 {
		return "-"
	}
	return strconv.Itoa(s)
}

func withServers(s int) string {
	if s == 0 {
		return ""
	}
	return fmt.Sprintf(" with %d servers", s)
}
