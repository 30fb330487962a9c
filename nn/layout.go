package nn

import (
	"fmt"
	"strings"
)

// Tensor names one contiguous range of the flat parameter vector.
type Tensor struct {
	Name   string
	Shape  []int
	Offset int
}

// Size is the number of float32 elements of t.
func (t Tensor) Size() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Layout describes how a model's parameters lie in one flat []float32:
// named tensors in order, each at an offset, without gaps.
type Layout struct {
	Tensors []Tensor
}

// Add appends a tensor of the given shape after the last one and returns it.
func (l *Layout) Add(name string, shape ...int) Tensor {
	t := Tensor{Name: name, Shape: append([]int(nil), shape...), Offset: l.Size()}
	l.Tensors = append(l.Tensors, t)
	return t
}

// Size is the total number of float32 elements in the vector.
func (l Layout) Size() int {
	if len(l.Tensors) == 0 {
		return 0
	}
	last := l.Tensors[len(l.Tensors)-1]
	return last.Offset + last.Size()
}

// Bytes is each tensor's size in bytes (float32), in parameter order: the
// layer sizes that the simulator (sim.Config.Layers) takes.
func (l Layout) Bytes() []int64 {
	out := make([]int64, len(l.Tensors))
	for i, t := range l.Tensors {
		out[i] = 4 * int64(t.Size())
	}
	return out
}

// Find returns the tensor with the given name.
func (l Layout) Find(name string) (Tensor, bool) {
	for _, t := range l.Tensors {
		if t.Name == name {
			return t, true
		}
	}
	return Tensor{}, false
}

// View returns the part of vec that holds t. vec must have l.Size() elements.
func (t Tensor) View(vec []float32) []float32 {
	return vec[t.Offset : t.Offset+t.Size() : t.Offset+t.Size()]
}

// Validate checks that the tensors are contiguous, start at zero, have
// positive dimensions and unique names.
func (l Layout) Validate() error {
	off := 0
	seen := make(map[string]bool, len(l.Tensors))
	for i, t := range l.Tensors {
		if t.Name == "" {
			return fmt.Errorf("layout tensor %d: empty name", i)
		}
		if seen[t.Name] {
			return fmt.Errorf("layout tensor %d: duplicate name %q", i, t.Name)
		}
		seen[t.Name] = true
		if len(t.Shape) == 0 {
			return fmt.Errorf("layout tensor %q: empty shape", t.Name)
		}
		for _, d := range t.Shape {
			if d <= 0 {
				return fmt.Errorf("layout tensor %q: shape %v has a non-positive dimension", t.Name, t.Shape)
			}
		}
		if t.Offset != off {
			return fmt.Errorf("layout tensor %q: offset %d, want %d (tensors must be contiguous)", t.Name, t.Offset, off)
		}
		off += t.Size()
	}
	return nil
}

// Equal reports whether two layouts have the same tensors.
func (l Layout) Equal(o Layout) bool {
	if len(l.Tensors) != len(o.Tensors) {
		return false
	}
	for i, t := range l.Tensors {
		u := o.Tensors[i]
		if t.Name != u.Name || t.Offset != u.Offset || len(t.Shape) != len(u.Shape) {
			return false
		}
		for j := range t.Shape {
			if t.Shape[j] != u.Shape[j] {
				return false
			}
		}
	}
	return true
}

// String is a one-line summary such as "fc1.weight[256 784] fc1.bias[256] …".
func (l Layout) String() string {
	var b strings.Builder
	for i, t := range l.Tensors {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s%v", t.Name, t.Shape)
	}
	return b.String()
}
