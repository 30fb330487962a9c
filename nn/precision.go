package nn

import (
	"errors"
	"fmt"
)

// Precision is what a device model's GEMMs take their operands in. The
// weights, gradients and activations stay float32 (the master weights are
// the caller's float32 vector, updated in float32); under BF16 and FP16
// each GEMM reads half-precision copies of its two inputs and accumulates
// into float32 (cuBLAS's GemmEx on the tensor cores), the mixed precision
// of Micikevicius et al. (ICLR 2018). FP16, whose exponent is 5 bits,
// also scales the loss (see DeviceModel.SetPrecision); BF16 keeps
// float32's range and needs no scaling.
type Precision int

const (
	// FP32 computes everything in float32 (the default).
	FP32 Precision = iota
	// BF16 multiplies bfloat16 copies of the operands.
	BF16
	// FP16 multiplies float16 copies, with dynamic loss scaling.
	FP16
)

var precisionNames = [...]string{FP32: "fp32", BF16: "bf16", FP16: "fp16"}

// String returns "fp32", "bf16" or "fp16".
func (p Precision) String() string {
	if p >= 0 && int(p) < len(precisionNames) {
		return precisionNames[p]
	}
	return fmt.Sprintf("Precision(%d)", int(p))
}

// Half reports whether p multiplies half-precision copies (BF16, FP16).
func (p Precision) Half() bool { return p == BF16 || p == FP16 }

// ParsePrecision parses "fp32", "bf16" or "fp16".
func ParsePrecision(s string) (Precision, error) {
	for p, name := range precisionNames {
		if s == name {
			return Precision(p), nil
		}
	}
	return FP32, fmt.Errorf("precision %q: want fp32, bf16 or fp16", s)
}

// Set parses s into p (flag.Value).
func (p *Precision) Set(s string) error {
	v, err := ParsePrecision(s)
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// ErrOverflow is wrapped by the error of an FP16 model whose gradients
// overflow float16 even with the loss unscaled (a loss scale of 1): no
// scale can help, so its training ends there (Err returns it).
var ErrOverflow = errors.New("nn: float16 gradients overflow at a loss scale of 1")

// lossScaler is dynamic loss scaling as PyTorch's GradScaler does it, with
// its defaults: the loss is multiplied by scale (first 2^16) before
// backward; a step whose gradients overflow is taken again at half the
// scale, and after growthInterval steps in a row without one the scale
// doubles.
type lossScaler struct {
	scale          float32
	growthInterval int
	good           int // steps since the last overflow or growth
	overflows      int // steps taken again
}

const (
	initialLossScale   = 1 << 16
	lossScaleGrowEvery = 2000
	// maxLossScale keeps the scale a normal float32 far from overflow.
	maxLossScale = 1 << 24
)

func newLossScaler() lossScaler {
	return lossScaler{scale: initialLossScale, growthInterval: lossScaleGrowEvery}
}

// ok counts a step without overflow.
func (s *lossScaler) ok() {
	if s.good++; s.good >= s.growthInterval && s.scale < maxLossScale {
		s.scale *= 2
		s.good = 0
	}
}

// overflow halves the scale after a step that overflowed; it reports
// whether the step can be taken again (false once the scale would fall
// below 1, where scaling no longer helps).
func (s *lossScaler) overflow() bool {
	s.overflows++
	s.good = 0
	if s.scale <= 1 {
		return false
	}
	s.scale /= 2
	return true
}
