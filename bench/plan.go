package bench

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/shoalml/shoal/consistency"
)

// Model is a model of the harness: its label in records and the shoal
// train flags that build it.
type Model struct {
	Label string
	Args  []string
	// Big: no test-set evaluations (10,000 samples through 25M parameters
	// take longer than the run); the model is there for its traffic.
	Big bool
}

// Models are the harness's models by the name --models takes: the two of
// Fashion-MNIST, and an MLP of 25.4M parameters (784-16384-768-10, a
// 101.8 MB vector) where communication dominates; --quick uses one of
// 6.4M (784-4096-768-10).
var Models = map[string]Model{
	"mlp":     {"mlp", []string{"--model", "mlp", "--hidden", "256,128"}, false},
	"cnn":     {"cnn", []string{"--model", "cnn"}, false},
	"big":     {"mlp-25m", []string{"--model", "mlp", "--hidden", "16384,768", "--batch", "16"}, true},
	"big-6m":  {"mlp-6m", []string{"--model", "mlp", "--hidden", "4096,768", "--batch", "16"}, true},
	"mlp-25m": {"mlp-25m", []string{"--model", "mlp", "--hidden", "16384,768", "--batch", "16"}, true},
	"mlp-6m":  {"mlp-6m", []string{"--model", "mlp", "--hidden", "4096,768", "--batch", "16"}, true},
}

// Run is one run of a plan.
type Run struct {
	Model   string // key of Models
	Mode    string // a training mode, async-overlap, or a peer's (ddp)
	Workers int
	Servers int // 0 for ring
	Steps   int64
	Epochs  int
	// Loopback runs without the NIC model, as the peers do (gloo's
	// connections are not shaped).
	Loopback bool
	// LocalSteps (sync, async), when > 0, is low-communication training:
	// shoal train --local-steps LocalSteps (DiLoCo).
	LocalSteps int
}

// ID names the run across results files (Record.ID): peer is empty for
// Shoal's runs; nicGbps is the modelled NIC (0: none).
func (r Run) ID(peer string, nicGbps float64) string {
	id := fmt.Sprintf("%s/%s/w%d/s%d", Models[r.Model].Label, r.Mode, r.Workers, r.Servers)
	if r.LocalSteps > 0 {
		id += "/h" + strconv.Itoa(r.LocalSteps)
	}
	if peer != "" {
		id = peer + "/" + id
	}
	if nicGbps > 0 {
		id += "/nic" + strconv.FormatFloat(nicGbps, 'g', -1, 64)
	}
	return id
}

// Plan is the matrix a harness run goes through.
type Plan struct {
	Runs  []Run
	Peers []Run // PyTorch DDP runs (mode "ddp")
}

// DefaultPlan is what `make bench` runs (about twelve minutes on 2 cores at
// 1 Gbit/s): convergence of the four modes on the MLP, throughput against
// workers for the MLP and the CNN, and the communication-bound 25M model
// at N = 2 and 4 with S = 1, 2, 4 servers, also with async's push and pull
// overlapped. quick is a smaller one, under a minute.
func DefaultPlan(quick bool) Plan {
	var p Plan
	async, sync, ssp, ring := consistency.Async.String(), consistency.Sync.String(), consistency.SSP.String(), consistency.Ring.String()
	modes := []string{async, sync, ssp, ring}
	add := func(r Run) {
		if r.Mode == ring {
			r.Servers = 0
		}
		p.Runs = append(p.Runs, r)
	}
	if quick {
		for _, mode := range modes {
			for _, w := range []int{1, 2} {
				add(Run{Model: "mlp", Mode: mode, Workers: w, Servers: 1, Steps: 100})
			}
		}
		add(Run{Model: "mlp", Mode: ring, Workers: 2, Steps: 100, Loopback: true})
		for _, mode := range modes {
			add(Run{Model: "big-6m", Mode: mode, Workers: 2, Servers: 1, Steps: 3})
		}
		add(Run{Model: "big-6m", Mode: sync, Workers: 2, Servers: 2, Steps: 3})
		add(Run{Model: "big-6m", Mode: modeAsyncOverlap, Workers: 2, Servers: 2, Steps: 3})
		p.Peers = []Run{{Model: "mlp", Mode: modeDDP, Workers: 2, Steps: 100}}
		return p
	}
	for _, mode := range modes {
		add(Run{Model: "mlp", Mode: mode, Workers: 2, Servers: 1, Epochs: 2})
		for _, w := range []int{1, 4} {
			add(Run{Model: "mlp", Mode: mode, Workers: w, Servers: 1, Steps: 300})
		}
	}
	// The peer's conditions: loopback, no NIC model.
	add(Run{Model: "mlp", Mode: ring, Workers: 2, Epochs: 2, Loopback: true})
	add(Run{Model: "mlp", Mode: async, Workers: 2, Servers: 1, Epochs: 2, Loopback: true})
	for _, mode := range modes {
		for _, w := range []int{1, 2} {
			add(Run{Model: "cnn", Mode: mode, Workers: w, Servers: 1, Steps: 100})
		}
	}
	for _, w := range []int{2, 4} {
		add(Run{Model: "big", Mode: ring, Workers: w, Steps: 4})
		for _, mode := range []string{sync, async, ssp, modeAsyncOverlap} {
			for _, s := range []int{1, 2, 4} {
				if s <= w {
					add(Run{Model: "big", Mode: mode, Workers: w, Servers: s, Steps: 4})
				}
			}
		}
	}
	p.Peers = []Run{
		{Model: "mlp", Mode: modeDDP, Workers: 2, Epochs: 2},
		{Model: "mlp", Mode: modeDDP, Workers: 1, Steps: 300},
		{Model: "mlp", Mode: modeDDP, Workers: 4, Steps: 300},
	}
	return p
}

// GridPlan is every combination of the lists; ring ignores the server
// counts.
func GridPlan(models, modes []string, workers, servers []int, steps int64, epochs int) Plan {
	var p Plan
	for _, m := range models {
		for _, mode := range modes {
			for _, w := range workers {
				if mode == consistency.Ring.String() {
					p.Runs = append(p.Runs, Run{Model: m, Mode: mode, Workers: w, Steps: steps, Epochs: epochs})
					continue
				}
				for _, s := range servers {
					p.Runs = append(p.Runs, Run{Model: m, Mode: mode, Workers: w, Servers: s, Steps: steps, Epochs: epochs})
				}
			}
		}
	}
	return p
}

// ParseGrid reads the grid flags of shoal bench train (comma-separated
// lists; an empty list takes its default) into a GridPlan. Errors name the
// flag and say what it takes.
func ParseGrid(models, modes, workers, servers string, steps int64, epochs int) (Plan, error) {
	list := func(s, def string) []string {
		if s == "" {
			s = def
		}
		return strings.Split(s, ",")
	}
	ints := func(flag, s, def string) ([]int, error) {
		var out []int
		for _, f := range list(s, def) {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				return nil, fmt.Errorf("--%s %q: want positive integers separated by commas", flag, s)
			}
			out = append(out, n)
		}
		return out, nil
	}
	ms := list(models, "mlp")
	for _, m := range ms {
		if _, ok := Models[m]; !ok {
			return Plan{}, fmt.Errorf("--models: unknown model %q (want mlp, cnn or big)", m)
		}
	}
	grid := trainingModes()
	var all []string
	for _, m := range consistency.All() {
		all = append(all, m.String())
	}
	mo := list(modes, strings.Join(all, ","))
	for _, m := range mo {
		if !slices.Contains(grid, m) {
			return Plan{}, fmt.Errorf("--modes: unknown mode %q (want %s)", m, strings.Join(grid, ", "))
		}
	}
	ws, err := ints("workers", workers, "1,2,4")
	if err != nil {
		return Plan{}, err
	}
	ss, err := ints("servers", servers, "1")
	if err != nil {
		return Plan{}, err
	}
	if steps < 1 && epochs < 1 {
		return Plan{}, fmt.Errorf("--steps %d, --epochs %d: want one of them >= 1", steps, epochs)
	}
	if epochs > 0 {
		steps = 0
	}
	return GridPlan(ms, mo, ws, ss, steps, epochs), nil
}

// WithLocalSteps is runs with, after each sync and async run, the same
// with h local steps (DiLoCo beside the modes it is compared with); h 0
// leaves runs as they are.
func WithLocalSteps(runs []Run, h int) []Run {
	if h <= 0 {
		return runs
	}
	var out []Run
	for _, r := range runs {
		out = append(out, r)
		if r.Mode == consistency.Sync.String() || r.Mode == consistency.Async.String() {
			r.LocalSteps = h
			out = append(out, r)
		}
	}
	return out
}

// DropLoopbackTwins drops the loopback runs that repeat a run of the
// plan: without a NIC model (--nic-gbps 0) every run is on loopback, and a
// loopback twin would be the same run under the same id.
func DropLoopbackTwins(runs []Run) []Run {
	var out []Run
	for _, r := range runs {
		twin := false
		for _, o := range runs {
			if r.Loopback && !o.Loopback {
				o.Loopback = true
				twin = twin || o == r
			}
		}
		if !twin {
			out = append(out, r)
		}
	}
	return out
}
