//go:build !cgo

package gpu

import (
	"fmt"

	"github.com/shoalml/shoal/nn"
)

// errNoCgo is what every CUDA entry point returns in a build without cgo.
var errNoCgo = fmt.Errorf("%w: built without cgo (CGO_ENABLED=0), so CUDA cannot be loaded", ErrUnavailable)

// Count returns ErrUnavailable: a build without cgo cannot load CUDA.
func Count() (int, error) { return 0, errNoCgo }

// Libraries returns ErrUnavailable.
func Libraries() ([]string, error) { return nil, errNoCgo }

// Device stands in for the cgo build's CUDA device; none is ever opened.
type Device struct{ nn.HostDevice }

// NewDevice returns ErrUnavailable.
func NewDevice(int) (*Device, error) { return nil, errNoCgo }

// Ordinal returns -1.
func (*Device) Ordinal() int { return -1 }
