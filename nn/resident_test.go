package nn_test

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
)

// TestResidentRunGuards: in a resident run ForwardBackward computes with
// the device's weights (not the host vector's values), Evaluate refuses
// a host vector older than the device's or another vector, and after
// EndResident both upload their params again.
func TestResidentRunGuards(t *testing.T) {
	m, err := nn.NewOnDevice(nn.Spec{Arch: "mlp", Hidden: []int{6}}, nn.NewHostDevice(nil))
	require.NoError(t, err)
	defer m.Close()
	n := m.Layout().Size()
	params := make([]float32, n)
	m.Init(params, 3)
	rng := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, 4*m.InputSize())
	for i := range x {
		x[i] = rng.Float32()
	}
	y := []int32{0, 1, 2, 3}
	opt, err := optim.New(optim.Config{Algorithm: optim.AdamW, LR: 1e-2, Beta1: 0.9, Beta2: 0.99, WeightDecay: 1e-2}, n)
	require.NoError(t, err)

	require.NoError(t, m.LoadResident(params, opt.LiveSlots()))
	assert.True(t, m.Resident())
	loaded := slices.Clone(params)
	grads := make([]float32, n)
	m.ForwardBackward(params, grads, x, y)
	s, err := opt.Advance()
	require.NoError(t, err)
	require.NoError(t, m.StepResident(grads, s))
	assert.Equal(t, loaded, params, "the host vector is not written until StoreResident")

	assert.PanicsWithValue(t, "nn: Evaluate in a resident run: the device's weights are newer than params (StoreResident first)",
		func() { m.Evaluate(params, x, y) })
	assert.PanicsWithValue(t, "nn: ForwardBackward in a resident run: params is not the vector LoadResident was given",
		func() { m.ForwardBackward(slices.Clone(params), grads, x, y) })

	// The device's weights, whatever the host vector holds.
	clear(params)
	g1 := make([]float32, n)
	m.ForwardBackward(params, g1, x, y)

	require.NoError(t, m.StoreResident(opt.LiveSlots()))
	assert.NotEqual(t, loaded, params, "StoreResident brought the stepped weights")
	stepped := slices.Clone(params)
	lossIn, correctIn := m.Evaluate(params, x, y)
	st := opt.State()
	assert.NotZero(t, st.Slots[optim.SlotExpAvgSq][0]+st.Slots[optim.SlotExpAvgSq][1], "the moments came back")

	m.EndResident()
	assert.False(t, m.Resident())
	lossOut, correctOut := m.Evaluate(params, x, y)
	assert.Equal(t, lossOut, lossIn)
	assert.Equal(t, correctOut, correctIn)
	g2 := make([]float32, n)
	m.ForwardBackward(stepped, g2, x, y)
	assert.Equal(t, g2, g1, "the resident pass used the device's weights, not the cleared host vector")
}
