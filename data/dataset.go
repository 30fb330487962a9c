package data

import (
	"errors"
	"fmt"
)

// Dataset is an in-memory labelled image set. Every method is safe for
// concurrent use: a Dataset is immutable once built.
type Dataset interface {
	// Name identifies the set in logs and reports, e.g. "fashion-mnist/train".
	Name() string
	// Len is the number of samples.
	Len() int
	// Shape is the shape of one sample, channels first.
	Shape() (c, h, w int)
	// Classes is the number of classes; every label is in [0, Classes()).
	Classes() int
	// Gather writes the samples idx[0], idx[1], … into x, one after the
	// other (sample k at x[k·c·h·w:(k+1)·c·h·w], channels first, float32),
	// and their labels into y[k]. It never blocks and does not retain x or
	// y. Only the first len(idx)·c·h·w elements of x and len(idx) of y are
	// written.
	//
	// Gather panics on programming errors only: x shorter than
	// len(idx)·c·h·w, y shorter than len(idx), or an index outside
	// [0, Len()).
	Gather(idx []int, x []float32, y []int32)
}

// Normalization says how Fashion-MNIST's uint8 pixels become float32.
type Normalization int

const (
	// NormalizeStandard maps a pixel p to (p/255 − FashionMNISTMean) /
	// FashionMNISTStd, which gives the training set roughly zero mean and
	// unit variance. It is the default, and what torchvision examples use.
	NormalizeStandard Normalization = iota
	// NormalizeUnit maps a pixel p to p/255, in [0, 1].
	NormalizeUnit
)

// The mean and standard deviation of Fashion-MNIST's training pixels,
// scaled to [0, 1] (the values torchvision examples use).
const (
	FashionMNISTMean = 0.2860
	FashionMNISTStd  = 0.3530
)

func (n Normalization) String() string {
	switch n {
	case NormalizeStandard:
		return "standard"
	case NormalizeUnit:
		return "unit"
	default:
		return fmt.Sprintf("Normalization(%d)", int(n))
	}
}

// table returns the float32 value of each of the 256 byte values.
func (n Normalization) table() (*[256]float32, error) {
	var t [256]float32
	switch n {
	case NormalizeStandard:
		for p := range t {
			t[p] = float32((float64(p)/255 - FashionMNISTMean) / FashionMNISTStd)
		}
	case NormalizeUnit:
		for p := range t {
			t[p] = float32(float64(p) / 255)
		}
	default:
		return nil, fmt.Errorf("unknown normalization %d: want NormalizeStandard or NormalizeUnit", int(n))
	}
	return &t, nil
}

// memDataset holds its samples either as bytes converted through a lookup
// table on Gather (real images: 4× less memory) or as float32 (synthetic).
type memDataset struct {
	name             string
	n, c, h, w, size int
	classes          int
	pix              []uint8       // n·size bytes, or nil
	lut              *[256]float32 // with pix
	f32              []float32     // n·size floats, or nil
	labels           []int32       // n
}

var _ Dataset = (*memDataset)(nil)

var errShape = errors.New("inconsistent dataset shape")

func (d *memDataset) check() error {
	if d.n < 1 || d.c < 1 || d.h < 1 || d.w < 1 || d.classes < 1 || d.size != d.c*d.h*d.w ||
		len(d.labels) != d.n || (d.pix == nil) == (d.f32 == nil) ||
		(d.pix != nil && (len(d.pix) != d.n*d.size || d.lut == nil)) ||
		(d.f32 != nil && len(d.f32) != d.n*d.size) {
		return fmt.Errorf("%s: %w", d.name, errShape)
	}
	return nil
}

func (d *memDataset) Name() string         { return d.name }
func (d *memDataset) Len() int             { return d.n }
func (d *memDataset) Shape() (c, h, w int) { return d.c, d.h, d.w }
func (d *memDataset) Classes() int         { return d.classes }
func (d *memDataset) String() string {
	return fmt.Sprintf("%s (%d samples of %d×%d×%d, %d classes)", d.name, d.n, d.c, d.h, d.w, d.classes)
}

func (d *memDataset) Gather(idx []int, x []float32, y []int32) {
	size := d.size
	if len(x) < len(idx)*size {
		panic(fmt.Sprintf("data: %s.Gather: x has %d floats, want at least %d (%d samples × %d)",
			d.name, len(x), len(idx)*size, len(idx), size))
	}
	if len(y) < len(idx) {
		panic(fmt.Sprintf("data: %s.Gather: y has %d labels, want at least %d", d.name, len(y), len(idx)))
	}
	for k, i := range idx {
		if uint(i) >= uint(d.n) {
			panic(fmt.Sprintf("data: %s.Gather: index %d (position %d) outside [0, %d)", d.name, i, k, d.n))
		}
		dst := x[k*size : (k+1)*size]
		if d.pix != nil {
			lut := d.lut
			src := d.pix[i*size : (i+1)*size]
			dst = dst[:len(src)] // lets the compiler drop the bounds checks
			for j, p := range src {
				dst[j] = lut[p]
			}
		} else {
			copy(dst, d.f32[i*size:(i+1)*size])
		}
		y[k] = d.labels[i]
	}
}
