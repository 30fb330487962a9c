package data

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The idx format (http://yann.lecun.com/exdb/mnist/): a 4-byte big-endian
// magic — two zero bytes, an element type, a number of dimensions — then
// one big-endian uint32 size per dimension, then the elements, row-major.
// Shoal reads element type 0x08 (unsigned byte), the only one MNIST-style
// datasets use.
const (
	// IDXImagesMagic is the magic of an idx3 unsigned-byte image file
	// (count × rows × cols).
	IDXImagesMagic uint32 = 0x00000803 // 2051
	// IDXLabelsMagic is the magic of an idx1 unsigned-byte label file.
	IDXLabelsMagic uint32 = 0x00000801 // 2049

	idxTypeUint8 = 0x08
	idxMaxDims   = 4

	// MaxIDXBytes bounds the data of one idx file (1 GiB). A header that
	// promises more is rejected before anything is allocated; Fashion-MNIST's
	// largest file holds 47,040,000 bytes.
	MaxIDXBytes = 1 << 30

	// idxFirstChunk is the most ReadIDX allocates before the data it
	// promises has actually arrived; it then grows the buffer by doubling,
	// never past what the header promises. So a lying header costs at most
	// about twice the bytes the input really holds.
	idxFirstChunk = 64 << 10
)

// ErrFormat is wrapped by every error that reports a malformed idx file.
var ErrFormat = errors.New("malformed idx file")

// TruncatedError reports an idx file shorter than its header promises.
// It wraps ErrFormat.
type TruncatedError struct {
	Want int64 // bytes the header promises, header included
	Got  int64 // bytes found
}

func (e *TruncatedError) Error() string {
	return fmt.Sprintf("truncated: header promises %d bytes in all, found %d", e.Want, e.Got)
}

// Unwrap makes errors.Is(err, ErrFormat) hold.
func (e *TruncatedError) Unwrap() error { return ErrFormat }

// IDX is a parsed idx file of unsigned bytes.
type IDX struct {
	Magic uint32  // e.g. IDXImagesMagic
	Dims  []int   // one size per dimension, outermost first
	Data  []uint8 // the product of Dims bytes, row-major
}

// ReadIDX parses an idx file of unsigned bytes from r, which must hold
// exactly the bytes the header promises: a short input is a
// *TruncatedError, trailing bytes are an error. Errors wrap ErrFormat
// unless they come from r. It never allocates more than MaxIDXBytes, nor
// much more than r actually delivers.
func ReadIDX(r io.Reader) (*IDX, error) { return readIDX(r, 0, nil) }

// ReadIDXImages is ReadIDX for an image file: the magic must be
// IDXImagesMagic (three dimensions: count, rows, cols).
func ReadIDXImages(r io.Reader) (*IDX, error) { return readIDX(r, IDXImagesMagic, nil) }

// ReadIDXLabels is ReadIDX for a label file: the magic must be
// IDXLabelsMagic (one dimension: count).
func ReadIDXLabels(r io.Reader) (*IDX, error) { return readIDX(r, IDXLabelsMagic, nil) }

func describeMagic(m uint32) string {
	switch m {
	case IDXImagesMagic:
		return "0x00000803 (2051, idx3 unsigned-byte images)"
	case IDXLabelsMagic:
		return "0x00000801 (2049, idx1 unsigned-byte labels)"
	default:
		return fmt.Sprintf("0x%08x", m)
	}
}

// readIDX reads an idx file; want, when not zero, is the only magic accepted.
func readIDX(r io.Reader, want uint32, dimsOK func(dims []int) error) (*IDX, error) {
	var head [4 + 4*idxMaxDims]byte
	if n, err := io.ReadFull(r, head[:4]); err != nil {
		return nil, readErr(err, 4, int64(n))
	}
	magic := binary.BigEndian.Uint32(head[:4])
	if want != 0 && magic != want {
		return nil, fmt.Errorf("%w: bad magic %s, want %s", ErrFormat, describeMagic(magic), describeMagic(want))
	}
	if head[0] != 0 || head[1] != 0 {
		return nil, fmt.Errorf("%w: bad magic 0x%08x, want two zero bytes first", ErrFormat, magic)
	}
	if head[2] != idxTypeUint8 {
		return nil, fmt.Errorf("%w: element type 0x%02x, want 0x%02x (unsigned byte)", ErrFormat, head[2], idxTypeUint8)
	}
	nd := int(head[3])
	if nd < 1 || nd > idxMaxDims {
		return nil, fmt.Errorf("%w: %d dimensions, want 1 to %d", ErrFormat, nd, idxMaxDims)
	}
	headLen := int64(4 + 4*nd)
	if n, err := io.ReadFull(r, head[4:headLen]); err != nil {
		return nil, readErr(err, headLen, int64(4+n))
	}
	dims := make([]int, nd)
	for i := range dims {
		dims[i] = int(binary.BigEndian.Uint32(head[4+4*i:]))
	}
	size := int64(1)
	for _, d := range dims {
		// Both factors are at most 2³⁰ and 2³²: the product cannot overflow.
		if size *= int64(d); size > MaxIDXBytes {
			return nil, fmt.Errorf("%w: dimensions %v promise more than %d bytes (MaxIDXBytes)",
				ErrFormat, dims, int64(MaxIDXBytes))
		}
	}
	// What the caller needs of the shape, before the data is read: a
	// small gzip file can promise, and hold, a gigabyte of zeros.
	if dimsOK != nil {
		if err := dimsOK(dims); err != nil {
			return nil, err
		}
	}
	buf, err := readExact(r, int(size))
	if err != nil && len(buf) < int(size) {
		return nil, readErr(err, headLen+size, headLen+int64(len(buf)))
	}
	if err != nil { // with the last of the data, e.g. a gzip checksum error
		return nil, fmt.Errorf("at the end of the %d bytes of idx data: %w", headLen+size, err)
	}
	// The input must end here. Reading to the end also makes a gzip
	// reader verify its checksum.
	var one [1]byte
	n, err := io.ReadFull(r, one[:])
	if n > 0 {
		return nil, fmt.Errorf("%w: trailing bytes: header promises %d bytes in all, found more", ErrFormat, headLen+size)
	}
	if err != io.EOF {
		return nil, fmt.Errorf("at the end of the %d bytes of idx data: %w", headLen+size, err)
	}
	return &IDX{Magic: magic, Dims: dims, Data: buf}, nil
}

// readErr turns a short read into a *TruncatedError and wraps anything else.
func readErr(err error, want, got int64) error {
	// A gzip stream cut short also ends in io.ErrUnexpectedEOF; either way
	// fewer bytes arrived than promised.
	if (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)) && got < want {
		return &TruncatedError{Want: want, Got: got}
	}
	return fmt.Errorf("after %d of %d bytes: %w", got, want, err)
}

// readExact reads want bytes from r, growing its buffer only as data
// arrives. On a short read it returns what it got and io.ErrUnexpectedEOF.
func readExact(r io.Reader, want int) ([]byte, error) {
	buf := make([]byte, 0, min(want, idxFirstChunk))
	for len(buf) < want {
		if len(buf) == cap(buf) {
			grown := make([]byte, len(buf), min(want, 2*cap(buf)))
			copy(grown, buf)
			buf = grown
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			if len(buf) < want {
				return buf, io.ErrUnexpectedEOF
			}
			break
		}
		if err != nil {
			return buf, err
		}
	}
	return buf, nil
}
