package worker_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/collective"
	"github.com/shoalml/shoal/internal/ringtest"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
	"github.com/shoalml/shoal/worker"
)

// TestResidentRing: two ranks whose weights and optimizer state stay on
// their (host) devices end where the ring stepping on the host ends, and
// the desync hash and the evaluations mid-run see the device's weights.
func TestResidentRing(t *testing.T) {
	ringtest.Run(t, 2, func(int) nn.Device { return nn.NewHostDevice(nil) })
}

// TestResidentRingRefusesAdagrad: no device kernel runs adagrad.
func TestResidentRingRefusesAdagrad(t *testing.T) {
	group := collective.NewMemGroup(1)
	defer group[0].Close()
	comm, err := collective.New(group[0], collective.DefaultConfig())
	require.NoError(t, err)
	m, err := nn.NewOnDevice(nn.Spec{Arch: "mlp", Hidden: []int{4}}, nn.NewHostDevice(nil))
	require.NoError(t, err)
	defer m.Close()
	_, err = worker.NewRing(comm, m.Layout().Size(), worker.RingConfig{Optimizer: optim.Config{Algorithm: optim.Adagrad, LR: 0.1},
		Initial: make([]float32, m.Layout().Size()), Resident: m})
	require.Error(t, err)
	assert.ErrorContains(t, err, "optimizer adagrad has no device kernel")
}
