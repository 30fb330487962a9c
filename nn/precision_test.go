package nn

import (
	"flag"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPrecision(t *testing.T) {
	for _, p := range []Precision{FP32, BF16, FP16} {
		got, err := ParsePrecision(p.String())
		require.NoError(t, err)
		assert.Equal(t, p, got)
	}
	assert.False(t, FP32.Half())
	assert.True(t, BF16.Half())
	assert.True(t, FP16.Half())
	_, err := ParsePrecision("fp8")
	assert.EqualError(t, err, `precision "fp8": want fp32, bf16 or fp16`)
	assert.Equal(t, "Precision(7)", Precision(7).String())

	var p Precision
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.Var(&p, "precision", "")
	require.NoError(t, fs.Parse([]string{"--precision", "bf16"}))
	assert.Equal(t, BF16, p)
	assert.Error(t, fs.Parse([]string{"--precision", "half"}))

	m, err := NewOnDevice(Spec{Arch: "mlp", Hidden: []int{4}}, NewHostDevice(nil))
	require.NoError(t, err)
	assert.EqualError(t, m.SetPrecision(Precision(3)), "nn: SetPrecision(Precision(3)): want fp32, bf16 or fp16")
	assert.Equal(t, FP32, m.Precision())
}

// TestLossScaler follows GradScaler's schedule: halve on overflow, double
// after 2,000 good steps in a row, and no step taken again below 1.
func TestLossScaler(t *testing.T) {
	s := newLossScaler()
	require.Equal(t, float32(65536), s.scale)
	for range 1999 {
		s.ok()
	}
	assert.Equal(t, float32(65536), s.scale, "1,999 good steps")
	s.ok()
	assert.Equal(t, float32(131072), s.scale, "2,000 good steps")
	for range 1000 {
		s.ok()
	}
	assert.True(t, s.overflow())
	assert.Equal(t, float32(65536), s.scale)
	for range 1999 {
		s.ok()
	}
	assert.Equal(t, float32(65536), s.scale, "an overflow starts the count again")
	assert.Equal(t, 1, s.overflows)

	for s.scale > 1 {
		require.True(t, s.overflow())
	}
	assert.False(t, s.overflow(), "at 1 there is nothing left to halve")
	assert.Equal(t, float32(1), s.scale)

	s = newLossScaler()
	s.scale = maxLossScale
	for range 4000 {
		s.ok()
	}
	assert.Equal(t, float32(maxLossScale), s.scale, "the scale stops growing at 2^24")
}
