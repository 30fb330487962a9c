//go:build !linux

package cpubind

// Allowed is ErrUnsupported outside Linux.
func Allowed() ([]int, error) { return nil, ErrUnsupported }

// Bind is ErrUnsupported outside Linux.
func Bind(cpus []int) error { return ErrUnsupported }
