package nn_test

import (
	"testing"

	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/nn/devicetest"
)

func TestHostDeviceConformance(t *testing.T) {
	devicetest.Run(t, nn.NewHostDevice(nil))
}
