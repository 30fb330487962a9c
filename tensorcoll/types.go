package tensorcoll

import (
	"fmt"
	"strings"

	"github.com/shoalml/shoal/collective"
)

// DType is the element type of a request's Data. Its values are part of
// cmd/libshoal's C ABI: do not renumber.
type DType uint8

const (
	Float32 DType = iota
	Float64
	Float16
	BFloat16
	Int32
	Int64
	Uint8
	Int8
	Int16
	Bool
	numDTypes
)

var dtypeNames = [...]string{Float32: "float32", Float64: "float64", Float16: "float16", BFloat16: "bfloat16",
	Int32: "int32", Int64: "int64", Uint8: "uint8", Int8: "int8", Int16: "int16", Bool: "bool"}

func (d DType) String() string {
	if d >= numDTypes {
		return fmt.Sprintf("DType(%d)", uint8(d))
	}
	return dtypeNames[d]
}

// Size is the number of bytes one element takes, 0 for an unknown d.
func (d DType) Size() int {
	switch d {
	case Float64, Int64:
		return 8
	case Float32, Int32:
		return 4
	case Float16, BFloat16, Int16:
		return 2
	case Uint8, Int8, Bool:
		return 1
	}
	return 0
}

func (d DType) isFloat() bool { return d <= BFloat16 }

// ReduceOp is the reduction of an Allreduce. Its values are part of the C
// ABI.
type ReduceOp uint8

const (
	Average ReduceOp = iota
	Sum
	Adasum
	Min
	Max
	Product
	numOps
)

var opNames = [...]string{Average: "average", Sum: "sum", Adasum: "adasum", Min: "min", Max: "max", Product: "product"}

func (o ReduceOp) String() string {
	if o >= numOps {
		return fmt.Sprintf("ReduceOp(%d)", uint8(o))
	}
	return opNames[o]
}

// Kind is the collective a request runs. Its values are part of the C ABI.
type Kind uint8

const (
	KindAllreduce Kind = iota
	KindBroadcast
	KindAllgather
	KindBarrier
	numKinds
)

var kindNames = [...]string{KindAllreduce: "allreduce", KindBroadcast: "broadcast", KindAllgather: "allgather", KindBarrier: "barrier"}

func (k Kind) String() string {
	if k >= numKinds {
		return fmt.Sprintf("Kind(%d)", uint8(k))
	}
	return kindNames[k]
}

// Request is one collective. Fields a Kind does not use must be zero.
type Request struct {
	Kind Kind
	// Name identifies the tensor (e.g. "allreduce.fc1.weight"); it is
	// compared between ranks, up to MaxNameLen bytes.
	Name string
	// Data is the tensor's memory: Count() elements of DType. Allreduce
	// and Broadcast write their result into it; Allgather only reads it.
	Data  []byte
	DType DType
	// Op, Compression, Prescale and Postscale are Allreduce's. Prescale
	// multiplies every rank's input before the reduction, Postscale the
	// result (0 means 1). Compression applies to floating-point data.
	Op          ReduceOp
	Compression collective.Compression
	Prescale    float64
	Postscale   float64
	// Root is Broadcast's source rank.
	Root int
	// RowBytes is Allgather's size of one row (the product of the
	// dimensions after the first, times the element size): ranks may
	// gather different numbers of rows, but their rows must be equal.
	RowBytes int
}

// MaxNameLen is the number of bytes of Request.Name the ranks compare.
const MaxNameLen = 88

// validate checks r on its own, before any rank is involved.
func (r *Request) validate(size int) error {
	if r.Kind >= numKinds {
		return fmt.Errorf("%v: unknown collective", r.Kind)
	}
	if r.Kind == KindBarrier {
		return nil
	}
	es := r.DType.Size()
	if es == 0 {
		return fmt.Errorf("%s %q: unsupported dtype %v (want one of %s)", r.Kind, r.Name, r.DType, strings.Join(dtypeNames[:], ", "))
	}
	if len(r.Data)%es != 0 {
		return fmt.Errorf("%s %q: %d bytes is not a whole number of %v elements", r.Kind, r.Name, len(r.Data), r.DType)
	}
	switch r.Kind {
	case KindAllreduce:
		if r.Op >= numOps {
			return fmt.Errorf("allreduce %q: unknown op %v", r.Name, r.Op)
		}
		if !r.DType.isFloat() {
			if r.Op == Average || r.Op == Adasum {
				return fmt.Errorf("allreduce %q: op %v on integer dtype %v: use sum, or a floating-point tensor", r.Name, r.Op, r.DType)
			}
			if scaled(r.Prescale) || scaled(r.Postscale) {
				return fmt.Errorf("allreduce %q: prescale/postscale on integer dtype %v", r.Name, r.DType)
			}
		}
		if r.Op == Adasum && r.DType == Float64 {
			return fmt.Errorf("allreduce %q: adasum on float64: use float32, float16 or bfloat16", r.Name)
		}
		if r.DType == Bool && r.Op != Min && r.Op != Max {
			return fmt.Errorf("allreduce %q: op %v on bool: use min (and) or max (or)", r.Name, r.Op)
		}
		if r.Compression < collective.None || r.Compression > collective.BFloat16 {
			return fmt.Errorf("allreduce %q: unknown compression %v", r.Name, r.Compression)
		}
	case KindBroadcast:
		if r.Root < 0 || r.Root >= size {
			return fmt.Errorf("broadcast %q: root rank %d not in [0, %d)", r.Name, r.Root, size)
		}
	case KindAllgather:
		if r.RowBytes <= 0 || len(r.Data)%r.RowBytes != 0 {
			return fmt.Errorf("allgather %q: %d bytes is not a whole number of rows of %d bytes", r.Name, len(r.Data), r.RowBytes)
		}
	}
	return nil
}

func scaled(f float64) bool { return f != 0 && f != 1 }
