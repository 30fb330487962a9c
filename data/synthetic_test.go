package data

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func gatherAll(ds Dataset) ([]float32, []int32) {
	c, h, w := ds.Shape()
	x := make([]float32, ds.Len()*c*h*w)
	y := make([]int32, ds.Len())
	idx := make([]int, ds.Len())
	for i := range idx {
		idx[i] = i
	}
	ds.Gather(idx, x, y)
	return x, y
}

func TestSyntheticDeterministic(t *testing.T) {
	t.Parallel()
	cfg := SyntheticConfig{Train: 300, Test: 100, C: 2, H: 5, W: 4, Classes: 3, Seed: 42, Noise: 0.5}
	train1, test1, err := Synthetic(cfg)
	require.NoError(t, err)
	train2, test2, err := Synthetic(cfg)
	require.NoError(t, err)
	x1, y1 := gatherAll(train1)
	x2, y2 := gatherAll(train2)
	assert.Equal(t, x1, x2, "same seed, same training data")
	assert.Equal(t, y1, y2)
	tx1, ty1 := gatherAll(test1)
	tx2, ty2 := gatherAll(test2)
	assert.Equal(t, tx1, tx2, "same seed, same test data")
	assert.Equal(t, ty1, ty2)
	assert.NotEqual(t, x1[:len(tx1)], tx1, "train and test draw different noise")

	assert.Equal(t, "synthetic/train", train1.Name())
	assert.Equal(t, "synthetic/test", test1.Name())
	assert.Equal(t, 300, train1.Len())
	assert.Equal(t, 100, test1.Len())
	assert.Equal(t, 3, train1.Classes())
	c, h, w := train1.Shape()
	assert.Equal(t, [3]int{2, 5, 4}, [3]int{c, h, w})
	for _, l := range append(y1, ty1...) {
		require.True(t, l >= 0 && l < 3, "label %d", l)
	}

	other := cfg
	other.Seed = 43
	x3, _ := syntheticTrain(t, other)
	assert.NotEqual(t, x1, x3, "another seed, other data")

	bigger := cfg
	bigger.Test = 500
	x4, y4 := syntheticTrain(t, bigger)
	assert.Equal(t, x1, x4, "the test size does not change the training set")
	assert.Equal(t, y1, y4)
}

// syntheticTrain returns the images and labels of the training set
// Synthetic(cfg) makes.
func syntheticTrain(t *testing.T, cfg SyntheticConfig) ([]float32, []int32) {
	t.Helper()
	train, _, err := Synthetic(cfg)
	require.NoError(t, err)
	return gatherAll(train)
}

// The default synthetic set is learnable: even a nearest-class-mean
// classifier fitted on the training set is nearly always right on the test
// set.
func TestSyntheticLearnable(t *testing.T) {
	t.Parallel()
	train, test, err := Synthetic(DefaultSyntheticConfig())
	require.NoError(t, err)
	const size = 784
	x, y := gatherAll(train)
	means := make([]float64, 10*size)
	var counts [10]int
	for i, l := range y {
		counts[l]++
		for j := range size {
			means[int(l)*size+j] += float64(x[i*size+j])
		}
	}
	for l, n := range counts {
		assert.Greater(t, n, 450, "class %d is about a tenth of the set", l)
		for j := range size {
			means[l*size+j] /= float64(n)
		}
	}
	tx, ty := gatherAll(test)
	right := 0
	for i, l := range ty {
		best, bestD := -1, math.Inf(1)
		for c := range 10 {
			d := 0.0
			for j := range size {
				e := float64(tx[i*size+j]) - means[c*size+j]
				d += e * e
			}
			if d < bestD {
				best, bestD = c, d
			}
		}
		if best == int(l) {
			right++
		}
	}
	assert.Greater(t, float64(right)/float64(len(ty)), 0.95, "nearest-mean accuracy")
}

func TestSyntheticConfigValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		modify func(*SyntheticConfig)
		has    string
	}{
		{name: "no training samples", modify: func(c *SyntheticConfig) { c.Train = 0 }, has: "train and test sets of 0 and 1000 samples: want ≥ 1 each"},
		{name: "no test samples", modify: func(c *SyntheticConfig) { c.Test = -1 }, has: "want ≥ 1 each"},
		{name: "zero shape", modify: func(c *SyntheticConfig) { c.H = 0 }, has: "shape is 1×0×28"},
		{name: "one class", modify: func(c *SyntheticConfig) { c.Classes = 1 }, has: "classes 1: want ≥ 2"},
		{name: "negative noise", modify: func(c *SyntheticConfig) { c.Noise = -1 }, has: "noise -1: want ≥ 0"},
		{name: "NaN noise", modify: func(c *SyntheticConfig) { c.Noise = math.NaN() }, has: "noise NaN"},
		{name: "too big", modify: func(c *SyntheticConfig) { c.Train = 1 << 30 }, has: "want at most 1073741824"},
		{name: "zero config", modify: func(c *SyntheticConfig) { *c = SyntheticConfig{} }, has: "start from DefaultSyntheticConfig"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := DefaultSyntheticConfig()
			tt.modify(&cfg)
			train, test, err := Synthetic(cfg)
			require.Error(t, err)
			assert.ErrorContains(t, err, tt.has)
			assert.Nil(t, train)
			assert.Nil(t, test)
		})
	}
}

func TestGatherPanicsOnProgrammingErrors(t *testing.T) {
	t.Parallel()
	cfg := SyntheticConfig{Train: 4, Test: 1, C: 1, H: 2, W: 2, Classes: 2, Seed: 1, Noise: 0}
	train, _, err := Synthetic(cfg)
	require.NoError(t, err)
	tests := []struct {
		name string
		idx  []int
		x    []float32
		y    []int32
		msg  string
	}{
		{name: "short x", idx: []int{0, 1}, x: make([]float32, 7), y: make([]int32, 2),
			msg: "data: synthetic/train.Gather: x has 7 floats, want at least 8 (2 samples × 4)"},
		{name: "short y", idx: []int{0, 1}, x: make([]float32, 8), y: make([]int32, 1),
			msg: "data: synthetic/train.Gather: y has 1 labels, want at least 2"},
		{name: "index out of range", idx: []int{0, 4}, x: make([]float32, 8), y: make([]int32, 2),
			msg: "data: synthetic/train.Gather: index 4 (position 1) outside [0, 4)"},
		{name: "negative index", idx: []int{-1}, x: make([]float32, 4), y: make([]int32, 1),
			msg: "data: synthetic/train.Gather: index -1 (position 0) outside [0, 4)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			assert.PanicsWithValue(t, tt.msg, func() { train.Gather(tt.idx, tt.x, tt.y) })
		})
	}
	// Longer buffers are fine: only the prefix is written.
	x := []float32{9, 9, 9, 9, 9, 9}
	y := []int32{7, 7}
	train.Gather([]int{2}, x, y)
	assert.Equal(t, []float32{9, 9}, x[4:])
	assert.Equal(t, int32(7), y[1])
}
