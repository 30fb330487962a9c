package tensorcoll

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// descriptorBytes is the size of one rank's descriptor on the wire: 32
// float32s' worth, so it travels as an Allgather of whole floats.
const descriptorBytes = 128

// Descriptor is what a rank submitted, as the ranks compare it.
type Descriptor struct {
	Kind        Kind
	DType       DType
	Op          ReduceOp
	Compression uint8
	Root        int32
	Bytes       int64
	RowBytes    int64
	Name        string
}

func describe(r *Request) Descriptor {
	d := Descriptor{Kind: r.Kind, Name: r.Name}
	if len(d.Name) > MaxNameLen {
		d.Name = d.Name[:MaxNameLen]
	}
	switch r.Kind {
	case KindAllreduce:
		d.DType, d.Op, d.Compression, d.Bytes = r.DType, r.Op, uint8(r.Compression), int64(len(r.Data))
	case KindBroadcast:
		d.DType, d.Root, d.Bytes = r.DType, int32(r.Root), int64(len(r.Data))
	case KindAllgather:
		d.DType, d.Bytes, d.RowBytes = r.DType, int64(len(r.Data)), int64(r.RowBytes)
	}
	return d
}

// put writes d into b, which holds descriptorBytes bytes.
func (d Descriptor) put(b []byte) {
	clear(b[:descriptorBytes])
	b[0], b[1], b[2], b[3] = byte(d.Kind), byte(d.DType), byte(d.Op), d.Compression
	binary.LittleEndian.PutUint32(b[4:], uint32(d.Root))
	binary.LittleEndian.PutUint64(b[8:], uint64(d.Bytes))
	binary.LittleEndian.PutUint64(b[16:], uint64(d.RowBytes))
	b[39] = byte(len(d.Name))
	copy(b[40:descriptorBytes], d.Name)
}

// parseDescriptor reads what put wrote.
func parseDescriptor(b []byte) (Descriptor, error) {
	n := int(b[39])
	if n > MaxNameLen {
		return Descriptor{}, fmt.Errorf("descriptor with a name of %d bytes, want at most %d", n, MaxNameLen)
	}
	return Descriptor{
		Kind: Kind(b[0]), DType: DType(b[1]), Op: ReduceOp(b[2]), Compression: b[3],
		Root:     int32(binary.LittleEndian.Uint32(b[4:])),
		Bytes:    int64(binary.LittleEndian.Uint64(b[8:])),
		RowBytes: int64(binary.LittleEndian.Uint64(b[16:])),
		Name:     string(b[40 : 40+n]),
	}, nil
}

// String is the descriptor as an error message shows it, e.g.
// `allreduce "grad.fc1" float32[4096] average`.
func (d Descriptor) String() string {
	switch d.Kind {
	case KindBarrier:
		return "barrier"
	case KindAllreduce:
		return fmt.Sprintf("allreduce %q %v[%d] %v compression %d", d.Name, d.DType, elems(d.Bytes, d.DType), d.Op, d.Compression)
	case KindBroadcast:
		return fmt.Sprintf("broadcast %q %v[%d] from root %d", d.Name, d.DType, elems(d.Bytes, d.DType), d.Root)
	case KindAllgather:
		return fmt.Sprintf("allgather %q %v rows of %d bytes", d.Name, d.DType, d.RowBytes)
	}
	return fmt.Sprintf("%v %q", d.Kind, d.Name)
}

func elems(n int64, d DType) int64 {
	if s := d.Size(); s > 0 {
		return n / int64(s)
	}
	return n
}

// matches says whether the ranks may run d and o together: equal in all
// but an Allgather's byte count.
func (d Descriptor) matches(o Descriptor) bool {
	if d.Kind == KindAllgather && o.Kind == KindAllgather {
		o.Bytes = d.Bytes
	}
	return d == o
}

// ErrMismatch marks collectives that differ between ranks.
var ErrMismatch = errors.New("ranks submitted different collectives")

// MismatchError lists what every rank submitted when they differ. The
// ranks' streams are still in step after it: the Session stays usable.
type MismatchError struct {
	// Descriptors is indexed by rank.
	Descriptors []Descriptor
}

func (e *MismatchError) Error() string {
	var b strings.Builder
	b.WriteString("ranks submitted different collectives (every rank must submit the same ones, in the same order):")
	for r, d := range e.Descriptors {
		fmt.Fprintf(&b, " rank %d: %v;", r, d)
	}
	return strings.TrimSuffix(b.String(), ";")
}

// Unwrap lets errors.Is find ErrMismatch.
func (e *MismatchError) Unwrap() error { return ErrMismatch }

// checkDescriptors returns a *MismatchError when the ranks' descriptors
// differ.
func checkDescriptors(ds []Descriptor) error {
	for _, d := range ds[1:] {
		if !d.matches(ds[0]) {
			return &MismatchError{Descriptors: ds}
		}
	}
	return nil
}
