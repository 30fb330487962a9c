package collective

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestAdasumInto(t *testing.T) {
	tests := []struct {
		name string
		a, b []float32
		want []float32
	}{
		{name: "orthogonal vectors add", a: []float32{1, 0, 0}, b: []float32{0, 2, 0}, want: []float32{1, 2, 0}},
		{name: "equal vectors give the vector", a: []float32{3, -4}, b: []float32{3, -4}, want: []float32{3, -4}},
		{name: "opposite vectors: 1.5a + 1.5b = 0", a: []float32{1, 2}, b: []float32{-1, -2}, want: []float32{0, 0}},
		// dot = 1, ‖a‖² = 1, ‖b‖² = 2: 0.5·a + 0.75·b.
		{name: "by hand", a: []float32{1, 0}, b: []float32{1, 1}, want: []float32{1.25, 0.75}},
		{name: "zero and g is g", a: []float32{0, 0}, b: []float32{5, -1}, want: []float32{5, -1}},
		{name: "g and zero is g", a: []float32{5, -1}, b: []float32{0, 0}, want: []float32{5, -1}},
		{name: "both zero", a: []float32{0, 0}, b: []float32{0, 0}, want: []float32{0, 0}},
		{name: "empty", a: []float32{}, b: []float32{}, want: []float32{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := append([]float32{}, tc.a...)
			adasumInto(a, tc.b)
			assert.InDeltaSlice(t, tc.want, a, 1e-6)
		})
	}
}
