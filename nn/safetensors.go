package nn

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
)

// ErrSafetensors marks a malformed safetensors file.
var ErrSafetensors = errors.New("malformed safetensors")

// maxHeaderBytes bounds the JSON header we accept (the format's own limit
// is 100 MB); a larger claim is a corrupt or foreign file.
const maxHeaderBytes = 100 << 20

type stEntry struct {
	DType       string   `json:"dtype"`
	Shape       []int    `json:"shape"`
	DataOffsets [2]int64 `json:"data_offsets"`
}

// WriteSafetensors writes vec, described by l, in the safetensors format
// (8-byte little-endian header length, JSON header, raw little-endian
// float32 data), one tensor per layout entry, so PyTorch's safetensors can
// load it. meta becomes the "__metadata__" map (may be nil).
func WriteSafetensors(w io.Writer, l Layout, vec []float32, meta map[string]string) error {
	if err := l.Validate(); err != nil {
		return err
	}
	if len(vec) != l.Size() {
		return fmt.Errorf("safetensors: vector has %d floats, layout %d", len(vec), l.Size())
	}
	header := make(map[string]any, len(l.Tensors)+1)
	for _, t := range l.Tensors {
		header[t.Name] = stEntry{DType: "F32", Shape: t.Shape, DataOffsets: [2]int64{int64(4 * t.Offset), int64(4 * (t.Offset + t.Size()))}}
	}
	if len(meta) > 0 {
		header["__metadata__"] = meta
	}
	js, err := json.Marshal(header)
	if err != nil {
		return err
	}
	// Pad the header with spaces so the data starts 8-byte aligned.
	for len(js)%8 != 0 {
		js = append(js, ' ')
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(js)))
	bw.Write(n[:])
	bw.Write(js)
	var b [4]byte
	for _, f := range vec {
		binary.LittleEndian.PutUint32(b[:], math.Float32bits(f))
		bw.Write(b[:])
	}
	return bw.Flush()
}

// SaveSafetensors writes the file atomically: a temporary file in the same
// folder, fsynced, then renamed over path.
func SaveSafetensors(path string, l Layout, vec []float32, meta map[string]string) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err = WriteSafetensors(f, l, vec, meta); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// ReadSafetensors reads a float32 safetensors file written by
// WriteSafetensors (or by PyTorch, for F32 tensors that tile the data
// without gaps) and returns its layout, in data order, the vector and the
// metadata. size is the number of bytes r holds; the header is checked
// against it before anything large is allocated.
func ReadSafetensors(r io.Reader, size int64) (Layout, []float32, map[string]string, error) {
	bad := func(format string, args ...any) (Layout, []float32, map[string]string, error) {
		return Layout{}, nil, nil, fmt.Errorf("%w: %s", ErrSafetensors, fmt.Sprintf(format, args...))
	}
	var n [8]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return bad("reading the 8-byte header length: %v", err)
	}
	hlen := binary.LittleEndian.Uint64(n[:])
	if hlen > maxHeaderBytes || int64(hlen) > size-8 {
		return bad("header length %d does not fit a file of %d bytes", hlen, size)
	}
	js := make([]byte, hlen)
	if _, err := io.ReadFull(r, js); err != nil {
		return bad("reading the %d-byte header: %v", hlen, err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(js, &raw); err != nil {
		return bad("header is not a JSON object: %v", err)
	}
	var meta map[string]string
	type named struct {
		name string
		e    stEntry
	}
	var entries []named
	for k, v := range raw {
		if k == "__metadata__" {
			if err := json.Unmarshal(v, &meta); err != nil {
				return bad("__metadata__ is not a map of strings: %v", err)
			}
			continue
		}
		var e stEntry
		if err := json.Unmarshal(v, &e); err != nil {
			return bad("tensor %q: %v", k, err)
		}
		if e.DType != "F32" {
			return bad("tensor %q has dtype %s, want F32", k, e.DType)
		}
		entries = append(entries, named{k, e})
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].e.DataOffsets[0] < entries[j].e.DataOffsets[0] })
	dataBytes := size - 8 - int64(hlen)
	var l Layout
	var off int64
	for _, t := range entries {
		elems := int64(1)
		for _, d := range t.e.Shape {
			if d <= 0 || elems > dataBytes/int64(d) {
				return bad("tensor %q: shape %v does not fit %d data bytes", t.name, t.e.Shape, dataBytes)
			}
			elems *= int64(d)
		}
		if len(t.e.Shape) == 0 {
			return bad("tensor %q: scalar tensors are not supported", t.name)
		}
		if t.e.DataOffsets[0] != off || t.e.DataOffsets[1] != off+4*elems {
			return bad("tensor %q: data_offsets %v, want [%d %d] (contiguous F32 tensors)", t.name, t.e.DataOffsets, off, off+4*elems)
		}
		off += 4 * elems
		l.Add(t.name, t.e.Shape...)
	}
	if err := l.Validate(); err != nil {
		return bad("%v", err)
	}
	if off != dataBytes {
		return bad("tensors hold %d bytes, the file has %d data bytes", off, dataBytes)
	}
	vec := make([]float32, off/4)
	buf := make([]byte, 64<<10)
	for i := 0; i < len(vec); {
		k := min(len(buf)/4, len(vec)-i)
		if _, err := io.ReadFull(r, buf[:4*k]); err != nil {
			return bad("reading tensor data at float %d: %v", i, err)
		}
		for j := range k {
			vec[i+j] = math.Float32frombits(binary.LittleEndian.Uint32(buf[4*j:]))
		}
		i += k
	}
	return l, vec, meta, nil
}

// LoadSafetensors reads a safetensors file from disk.
func LoadSafetensors(path string) (Layout, []float32, map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return Layout{}, nil, nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Layout{}, nil, nil, err
	}
	l, v, m, err := ReadSafetensors(bufio.NewReader(f), st.Size())
	if err != nil {
		return Layout{}, nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return l, v, m, nil
}
