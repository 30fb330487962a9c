package worker_test

import (
	"errors"
	"testing"

	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/worker"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lostDevice is a host device whose context is lost after some syncs, as
// a GPU's is after an illegal address.
type lostDevice struct {
	*nn.HostDevice
	syncs, failAt int
}

var errLost = errors.New("an illegal memory access was encountered")

func (d *lostDevice) Sync() error {
	d.syncs++
	if d.syncs >= d.failAt {
		return errLost
	}
	return nil
}

// TestAFailedDeviceEndsTheRun: a model whose device fails ends the run
// with the device's error, not as a diverged model.
func TestAFailedDeviceEndsTheRun(t *testing.T) {
	train, test := synthetic(t)
	dev := &lostDevice{HostDevice: nn.NewHostDevice(nil), failAt: 4}
	model, err := nn.NewOnDevice(nn.Spec{Arch: "mlp", Hidden: []int{32}}, dev)
	require.NoError(t, err)
	defer model.Close()
	f := &fakePS{params: make([]float32, model.Layout().Size())}
	model.Init(f.params, 1)
	_, err = runAlone(t, f, model, train)
	require.ErrorIs(t, err, errLost)
	assert.ErrorIs(t, err, nn.ErrDevice)
	assert.NotErrorIs(t, err, worker.ErrDiverged)
	assert.ErrorContains(t, err, "step 3:")
	assert.Equal(t, 3, f.pushes, "the three good steps were pushed, the failed one not")

	// Evaluation on the lost device says so too.
	_, err = worker.Evaluate(ctxT(t), model, f.params, test, 100)
	require.ErrorIs(t, err, errLost)
}
