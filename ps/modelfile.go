package ps

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"

	"github.com/shoalml/shoal/nn"
)

// A model file is what a shard started without a model of its own (shoal
// ps --init-from) begins from: the layout and initial values of a model
// Shoal does not build itself, written by the worker that holds it (rank
// 0 of a PyTorch job, through libshoal). Its format, little-endian:
//
//	"SHMODL01"
//	uint32  length of the header
//	header  JSON: {"tensors":[{"name":"fc1.weight","shape":[128,784]},...]},
//	        the tensors in vector order, contiguous from offset 0
//	uint64  number of floats, the layout's size
//	float32 × that number
//	uint32  CRC-32 (IEEE) of everything before it
const modelMagic = "SHMODL01"

// Bounds a model file is held to before anything is allocated.
const (
	// MaxModelFloats is the largest vector a model file may hold: 4 GiB
	// of float32, more than one job's shards serve on one machine.
	MaxModelFloats = 1 << 30
	maxModelHeader = 16 << 20
	maxTensorName  = 1024
)

// ErrModelFile marks a model file that cannot be read: missing,
// truncated, corrupt or out of bounds. The message says which and what was
// expected.
var ErrModelFile = errors.New("model file")

type modelHeader struct {
	Tensors []modelTensor `json:"tensors"`
}

type modelTensor struct {
	Name  string `json:"name"`
	Shape []int  `json:"shape"`
}

// WriteModelFile writes layout and values to path as a model file, mode
// 0600, atomically: a reader sees the whole file or none (it is written
// beside path and renamed).
func WriteModelFile(path string, layout nn.Layout, values []float32) error {
	if err := layout.Validate(); err != nil {
		return fmt.Errorf("model file %s: %w", path, err)
	}
	if layout.Size() != len(values) || len(values) > MaxModelFloats {
		return fmt.Errorf("model file %s: %d values for a layout of %d floats (at most %d)", path, len(values), layout.Size(), MaxModelFloats)
	}
	h := modelHeader{Tensors: make([]modelTensor, len(layout.Tensors))}
	for i, t := range layout.Tensors {
		h.Tensors[i] = modelTensor{Name: t.Name, Shape: t.Shape}
	}
	head, err := json.Marshal(h)
	if err != nil {
		return err
	}
	if len(head) > maxModelHeader {
		return fmt.Errorf("model file %s: a header of %d bytes (at most %d): too many tensors or too long names", path, len(head), maxModelHeader)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("model file: %w", err)
	}
	defer os.Remove(tmp.Name()) // after the rename, nothing to remove
	crc := crc32.NewIEEE()
	w := bufio.NewWriterSize(io.MultiWriter(tmp, crc), 1<<20)
	var buf [8]byte
	w.WriteString(modelMagic)
	binary.LittleEndian.PutUint32(buf[:4], uint32(len(head)))
	w.Write(buf[:4])
	w.Write(head)
	binary.LittleEndian.PutUint64(buf[:], uint64(len(values)))
	w.Write(buf[:])
	for _, v := range values {
		binary.LittleEndian.PutUint32(buf[:4], math.Float32bits(v))
		w.Write(buf[:4])
	}
	err = w.Flush()
	binary.LittleEndian.PutUint32(buf[:4], crc.Sum32())
	if err == nil {
		_, err = tmp.Write(buf[:4])
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("model file %s: %w", path, err)
	}
	return nil
}

// ReadModelFile reads a model file written by WriteModelFile. Every bound
// is checked before the memory it implies is allocated; an error wraps
// ErrModelFile and says what was wrong.
func ReadModelFile(path string) (nn.Layout, []float32, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w %s: %s", ErrModelFile, path, fmt.Sprintf(format, args...))
	}
	f, err := os.Open(path)
	if err != nil {
		return nn.Layout{}, nil, fmt.Errorf("%w: %w", ErrModelFile, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nn.Layout{}, nil, fmt.Errorf("%w: %w", ErrModelFile, err)
	}
	crc := crc32.NewIEEE()
	r := io.TeeReader(bufio.NewReaderSize(f, 1<<20), crc)
	var pre [12]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil || string(pre[:8]) != modelMagic {
		return nn.Layout{}, nil, bad("not a Shoal model file (want it to begin %q)", modelMagic)
	}
	hlen := int64(binary.LittleEndian.Uint32(pre[8:]))
	if hlen > maxModelHeader || 12+hlen+12 > st.Size() {
		return nn.Layout{}, nil, bad("a header of %d bytes in a file of %d (at most %d)", hlen, st.Size(), maxModelHeader)
	}
	head := make([]byte, hlen)
	if _, err := io.ReadFull(r, head); err != nil {
		return nn.Layout{}, nil, bad("truncated header: %v", err)
	}
	layout, err := parseModelHeader(head)
	if err != nil {
		return nn.Layout{}, nil, bad("%v", err)
	}
	var nb [8]byte
	if _, err := io.ReadFull(r, nb[:]); err != nil {
		return nn.Layout{}, nil, bad("truncated: %v", err)
	}
	n := binary.LittleEndian.Uint64(nb[:])
	if n != uint64(layout.Size()) {
		return nn.Layout{}, nil, bad("%d floats for a layout of %d", n, layout.Size())
	}
	if want := 12 + hlen + 8 + 4*int64(n) + 4; st.Size() != want {
		return nn.Layout{}, nil, bad("%d bytes, want %d for %d floats", st.Size(), want, n)
	}
	values := make([]float32, n)
	raw := make([]byte, 1<<20)
	for i := 0; i < len(values); {
		k := min(len(values)-i, len(raw)/4)
		if _, err := io.ReadFull(r, raw[:4*k]); err != nil {
			return nn.Layout{}, nil, bad("truncated values: %v", err)
		}
		for j := range k {
			values[i+j] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*j:]))
		}
		i += k
	}
	sum := crc.Sum32()
	var cb [4]byte
	if _, err := io.ReadFull(r, cb[:]); err != nil {
		return nn.Layout{}, nil, bad("truncated checksum: %v", err)
	}
	if got := binary.LittleEndian.Uint32(cb[:]); got != sum {
		return nn.Layout{}, nil, bad("checksum %08x, the contents sum to %08x: the file is corrupt", got, sum)
	}
	return layout, values, nil
}

// parseModelHeader is the layout the header describes, checked.
func parseModelHeader(head []byte) (nn.Layout, error) {
	var h modelHeader
	if err := json.Unmarshal(head, &h); err != nil {
		return nn.Layout{}, fmt.Errorf("header: %v", err)
	}
	if len(h.Tensors) == 0 {
		return nn.Layout{}, errors.New("no tensors")
	}
	var l nn.Layout
	total := 0
	for i, t := range h.Tensors {
		if len(t.Name) > maxTensorName {
			return nn.Layout{}, fmt.Errorf("tensor %d: a name of %d bytes (at most %d)", i, len(t.Name), maxTensorName)
		}
		size := 1
		for _, d := range t.Shape {
			if d < 1 || size > MaxModelFloats/d {
				return nn.Layout{}, fmt.Errorf("tensor %d (%s): shape %v: want positive dimensions, at most %d floats in all", i, t.Name, t.Shape, MaxModelFloats)
			}
			size *= d
		}
		if total += size; total > MaxModelFloats {
			return nn.Layout{}, fmt.Errorf("more than %d floats", MaxModelFloats)
		}
		l.Add(t.Name, t.Shape...)
	}
	if err := l.Validate(); err != nil {
		return nn.Layout{}, err
	}
	return l, nil
}
