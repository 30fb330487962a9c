package collective

import "github.com/shoalml/shoal/wire"

// encoding is c's wire format.
func (c Compression) encoding() wire.Encoding {
	switch c {
	case Float16:
		return wire.Float16
	case BFloat16:
		return wire.BFloat16
	}
	return wire.Float32
}

// wireSize is the number of bytes one float32 takes on the wire.
func (c Compression) wireSize() int { return c.encoding().Size() }

// quantize rounds every value of x to the nearest value of the wire format.
func (c Compression) quantize(x []float32) { c.encoding().Quantize(x) }

// codec turns float32 slices into wire bytes and back for one Compression.
// native selects the zero-copy path for uncompressed data (on
// little-endian hosts); tests turn it off to cover the copying path.
type codec struct {
	comp   Compression
	native bool
}

// encode returns the wire form of src, either aliasing src (uncompressed,
// native) or written into scratch, which must hold wireSize·len(src) bytes.
func (k codec) encode(scratch []byte, src []float32) []byte {
	if k.comp == None && k.native {
		return wire.Float32Bytes(src)
	}
	w := scratch[:k.comp.wireSize()*len(src)]
	k.comp.encoding().Put(w, src)
	return w
}

// wire returns the bytes a Recv of len(dst) floats should fill: dst itself
// when no decoding is needed, else a prefix of scratch, which must then be
// passed to decode.
func (k codec) wire(scratch []byte, dst []float32) (buf []byte, direct bool) {
	if k.comp == None && k.native {
		return wire.Float32Bytes(dst), true
	}
	return scratch[:k.comp.wireSize()*len(dst)], false
}

// decode fills dst from its wire form w, which wire sized: it cannot fail.
func (k codec) decode(dst []float32, w []byte) {
	_ = k.comp.encoding().Decode(dst, w)
}
