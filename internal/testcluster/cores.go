package testcluster

import (
	"math"
	"testing"

	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
	"github.com/shoalml/shoal/ps"
	"github.com/shoalml/shoal/shard"
)

// Cores returns the servers shards of a vector of n floats named "w", in
// chunks of chunkFloats, with plain SGD at lr and initial value i at index
// i.
func Cores(t testing.TB, n, servers, chunkFloats int, lr float64) []*ps.Server {
	t.Helper()
	cores, err := NewCores(n, servers, chunkFloats, lr)
	if err != nil {
		t.Fatal(err)
	}
	return cores
}

// CoresFor returns the async shards of the vector initial described by l,
// with plain SGD at lr.
func CoresFor(t testing.TB, l nn.Layout, initial []float32, servers, chunkFloats int, lr float64) []*ps.Server {
	t.Helper()
	cores, err := NewCoresFor(l, initial, servers, chunkFloats, lr)
	if err != nil {
		t.Fatal(err)
	}
	return cores
}

// CoresWith returns the shards of initial, each configured as cfg (whose
// Shard, Plan and Layout it sets).
func CoresWith(t testing.TB, cfg ps.Config, l nn.Layout, initial []float32, servers, chunkFloats int) []*ps.Server {
	t.Helper()
	cores, err := NewCoresWith(cfg, l, initial, servers, chunkFloats)
	if err != nil {
		t.Fatal(err)
	}
	return cores
}

// NewCores is Cores for code without a testing.TB (examples).
func NewCores(n, servers, chunkFloats int, lr float64) ([]*ps.Server, error) {
	var l nn.Layout
	l.Add("w", n)
	initial := make([]float32, n)
	for i := range initial {
		initial[i] = float32(i)
	}
	return NewCoresFor(l, initial, servers, chunkFloats, lr)
}

// NewCoresFor is CoresFor for code without a testing.TB (examples).
func NewCoresFor(l nn.Layout, initial []float32, servers, chunkFloats int, lr float64) ([]*ps.Server, error) {
	cfg := ps.DefaultConfig()
	cfg.Optimizer = optim.DefaultConfig()
	cfg.Optimizer.LR = lr
	return NewCoresWith(cfg, l, initial, servers, chunkFloats)
}

// NewCoresWith is CoresWith for code without a testing.TB (examples).
func NewCoresWith(cfg ps.Config, l nn.Layout, initial []float32, servers, chunkFloats int) ([]*ps.Server, error) {
	plan, err := shard.New(l.Size(), servers, 4*chunkFloats)
	if err != nil {
		return nil, err
	}
	var cores []*ps.Server
	for s := range servers {
		c := cfg
		c.Shard, c.Plan, c.Layout = s, plan, l
		core, err := ps.New(c, initial)
		if err != nil {
			return nil, err
		}
		cores = append(cores, core)
	}
	return cores, nil
}

// RelErr is ‖a−b‖/‖b‖, the relative error of a against b (of equal
// length), in float64.
func RelErr(a, b []float32) float64 {
	var num, den float64
	for i := range a {
		d := float64(a[i]) - float64(b[i])
		num += d * d
		den += float64(b[i]) * float64(b[i])
	}
	return math.Sqrt(num / den)
}
