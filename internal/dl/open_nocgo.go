//go:build !cgo

package dl

import "unsafe"

// Lib stands in for the cgo build's library; none is ever opened.
type Lib struct{}

// Open returns ErrNoCgo: a build without cgo has no dlopen.
func Open(string) (*Lib, error) { return nil, ErrNoCgo }

// Sym returns ErrNoCgo.
func (*Lib) Sym(string) (unsafe.Pointer, error) { return nil, ErrNoCgo }

// Path returns "".
func (*Lib) Path(unsafe.Pointer) string { return "" }

// Close does nothing.
func (*Lib) Close() {}
