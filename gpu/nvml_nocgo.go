//go:build !cgo

package gpu

import "fmt"

// Devices returns ErrUnavailable: go-nvml needs cgo.
func Devices() (Inventory, error) {
	return Inventory{}, fmt.Errorf("%w: built without cgo (CGO_ENABLED=0), so NVML cannot be loaded", ErrUnavailable)
}
