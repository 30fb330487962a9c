package archtest

import (
	"go/build"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/shoalml/shoal"

// layer is each package's place in ARCHITECTURE.md's table, bottom up. A
// package may import only packages of its own layer or below. A package
// missing here fails TestNoUpwardImports: place a new package before it
// lands.
var layer = map[string]int{
	// leaves
	"wire": 0, "consistency": 0, "shard": 0, "optim": 0, "data": 0,
	"timeline": 0, "secure": 0, "internal/freelist": 0, "internal/deadline": 0,
	"internal/lockedio": 0, "internal/netshape": 0, "internal/rawtcp": 0,
	"internal/cpubind": 0, "internal/dl": 0, "record": 0, "pscall": 0,
	// the model and the wire's messages
	"nn": 1, "proto/shoalpb": 1,
	// devices
	"gpu": 2,
	// cores (no gRPC)
	"ps": 3, "collective": 3, "worker": 3, "sim": 3,
	// adapters
	"rpc": 4, "client": 4, "worker/psclient": 4, "collective/collnet": 4,
	// running, watching, measuring
	"cluster": 5, "elastic": 5, "metrics": 5, "emulate": 5, "launch": 5,
	"bench": 5, "bench/collbench": 5, "bench/peers": 5, "machine": 5,
	// one process in a role, a local job
	"node": 6, "job": 7,
	// the harness's sweeps, which run jobs; the command-line contracts
	"bench/harness": 8, "flags": 8,
	// collectives on a foreign runtime's tensors (shoal.torch)
	"tensorcoll": 5, "tensorps": 5,
	// top
	"cmd/shoal": 9, "cmd/libshoal": 9,
}

// harnesses may import anything; nothing but tests may import them.
var harnesses = map[string]bool{
	"internal/testcluster":      true,
	"internal/composetest":      true,
	"internal/archtest":         true,
	"internal/cudaemu":          true,
	"internal/cudaemu/emubuild": true,
	"collective/collectivetest": true,
	"nn/devicetest":             true,
	"internal/ringtest":         true,
	"deploy":                    true,
	"scripts/probe":             true, // issue 44's attacks, run by hand (docs/PROBE.md)
}

// packages lists the module's packages (relative import paths) with
// their non-test imports inside the module.
func packages(t *testing.T) map[string][]string {
	t.Helper()
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	out := map[string][]string{}
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "docs" || name == "clients") {
			return filepath.SkipDir
		}
		p, err := build.ImportDir(path, 0)
		if err != nil {
			if _, ok := err.(*build.NoGoError); ok {
				return nil
			}
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		var deps []string
		for _, imp := range p.Imports {
			if r, ok := strings.CutPrefix(imp, module+"/"); ok {
				deps = append(deps, r)
			}
		}
		out[filepath.ToSlash(rel)] = deps
		return nil
	})
	require.NoError(t, err)
	require.NotEmpty(t, out)
	return out
}

func TestNoUpwardImports(t *testing.T) {
	pkgs := packages(t)
	var names []string
	for p := range pkgs {
		names = append(names, p)
	}
	sort.Strings(names)
	for _, p := range names {
		if harnesses[p] {
			continue
		}
		lp, ok := layer[p]
		if !ok {
			t.Errorf("package %s has no layer: add it to archtest's table and ARCHITECTURE.md", p)
			continue
		}
		for _, d := range pkgs[p] {
			if harnesses[d] {
				t.Errorf("%s imports the test harness %s", p, d)
				continue
			}
			if ld, ok := layer[d]; ok && ld > lp {
				t.Errorf("%s (layer %d) imports %s (layer %d): dependencies point down only", p, lp, d, ld)
			}
		}
	}
}

// TestTheLauncherDoesNotPullInPlots: the job library and the launcher
// carry no plotting (gonum/plot is the harness's).
func TestTheLauncherDoesNotPullInPlots(t *testing.T) {
	pkgs := packages(t)
	for _, root := range []string{"launch", "job", "node"} {
		if _, ok := pkgs[root]; !ok {
			continue
		}
		seen := map[string]bool{}
		var walk func(p string) []string
		walk = func(p string) []string {
			if seen[p] {
				return nil
			}
			seen[p] = true
			if plots(t, p) {
				return []string{p}
			}
			for _, d := range pkgs[p] {
				if path := walk(d); path != nil {
					return append([]string{p}, path...)
				}
			}
			return nil
		}
		if path := walk(root); path != nil {
			t.Errorf("%s reaches gonum.org/v1/plot through %s", root, strings.Join(path, " → "))
		}
	}
}

// plots says whether package p imports gonum/plot directly.
func plots(t *testing.T, p string) bool {
	t.Helper()
	bp, err := build.ImportDir(filepath.Join("../..", p), 0)
	require.NoError(t, err)
	for _, imp := range bp.Imports {
		if strings.HasPrefix(imp, "gonum.org/v1/plot") {
			return true
		}
	}
	return false
}
