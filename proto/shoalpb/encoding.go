package shoalpb

import "github.com/shoalml/shoal/wire"

// Wire returns the tensor encoding e names. ok is false for a value this
// build does not know (a newer peer's); enc is then wire.Float32.
func (e Encoding) Wire() (enc wire.Encoding, ok bool) {
	switch e {
	case Encoding_FLOAT32:
		return wire.Float32, true
	case Encoding_FLOAT16:
		return wire.Float16, true
	case Encoding_BFLOAT16:
		return wire.BFloat16, true
	case Encoding_INT8:
		return wire.Int8, true
	}
	return wire.Float32, false
}
