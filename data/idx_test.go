package data

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReadIDX(t *testing.T) {
	t.Parallel()
	labels := encodeIDX(IDXLabelsMagic, []uint32{3}, []byte{9, 0, 3})
	images := encodeIDX(IDXImagesMagic, []uint32{2, 2, 3}, []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	tests := []struct {
		name      string
		in        []byte
		read      func(io.Reader) (*IDX, error)
		wantDims  []int
		wantData  []byte
		truncated *TruncatedError // want this truncation error
		errHas    string          // else, when set, want an ErrFormat error containing this
	}{
		{name: "labels", in: labels, read: ReadIDXLabels, wantDims: []int{3}, wantData: []byte{9, 0, 3}},
		{name: "images", in: images, read: ReadIDXImages, wantDims: []int{2, 2, 3}, wantData: images[16:]},
		{name: "any magic", in: images, read: ReadIDX, wantDims: []int{2, 2, 3}, wantData: images[16:]},
		{name: "empty set", in: encodeIDX(IDXLabelsMagic, []uint32{0}, nil), read: ReadIDX, wantDims: []int{0}, wantData: []byte{}},
		{name: "labels as images", in: labels, read: ReadIDXImages, errHas: "bad magic 0x00000801 (2049, idx1 unsigned-byte labels), want 0x00000803 (2051"},
		{name: "images as labels", in: images, read: ReadIDXLabels, errHas: "want 0x00000801 (2049"},
		{name: "nonzero magic prefix", in: encodeIDX(0x01000801, []uint32{1}, []byte{0}), read: ReadIDX, errHas: "want two zero bytes first"},
		{name: "float elements", in: encodeIDX(0x00000d01, []uint32{1}, []byte{0, 0, 0, 0}), read: ReadIDX, errHas: "element type 0x0d, want 0x08"},
		{name: "no dimensions", in: encodeIDX(0x00000800, nil, nil), read: ReadIDX, errHas: "0 dimensions, want 1 to 4"},
		{name: "too many dimensions", in: encodeIDX(0x00000809, make([]uint32, 9), nil), read: ReadIDX, errHas: "9 dimensions"},
		{name: "empty input", in: nil, read: ReadIDX, truncated: &TruncatedError{Want: 4, Got: 0}},
		{name: "short magic", in: []byte{0, 0}, read: ReadIDX, truncated: &TruncatedError{Want: 4, Got: 2}},
		{name: "short dims", in: images[:10], read: ReadIDXImages, truncated: &TruncatedError{Want: 16, Got: 10}},
		{name: "short data", in: images[:20], read: ReadIDXImages, truncated: &TruncatedError{Want: 28, Got: 20}},
		{name: "lying count", in: encodeIDX(IDXLabelsMagic, []uint32{1 << 29}, []byte{1, 2}), read: ReadIDXLabels, truncated: &TruncatedError{Want: 8 + 1<<29, Got: 10}},
		{name: "over the size limit", in: encodeIDX(IDXImagesMagic, []uint32{1 << 31, 28, 28}, nil), read: ReadIDXImages, errHas: "more than 1073741824 bytes"},
		{name: "product over the limit", in: encodeIDX(0x00000804, []uint32{1 << 16, 1 << 16, 1 << 16, 1 << 16}, nil), read: ReadIDX, errHas: "more than 1073741824 bytes"},
		{name: "trailing bytes", in: append(bytes.Clone(labels), 7), read: ReadIDX, errHas: "trailing bytes: header promises 11 bytes in all"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			idx, err := tt.read(bytes.NewReader(tt.in))
			switch {
			case tt.truncated != nil:
				var te *TruncatedError
				require.ErrorAs(t, err, &te)
				assert.Equal(t, tt.truncated, te)
				assert.ErrorIs(t, err, ErrFormat)
				assert.Nil(t, idx)
			case tt.errHas != "":
				require.ErrorIs(t, err, ErrFormat)
				assert.ErrorContains(t, err, tt.errHas)
				assert.Nil(t, idx)
			default:
				require.NoError(t, err)
				assert.Equal(t, tt.wantDims, idx.Dims)
				assert.Equal(t, tt.wantData, idx.Data)
				assert.Equal(t, uint32(tt.in[2])<<8|uint32(tt.in[3]), idx.Magic)
			}
		})
	}
}

// oneByteReader delivers its input a byte at a time, like a slow stream.
type oneByteReader struct{ b []byte }

func (r *oneByteReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	p[0], r.b = r.b[0], r.b[1:]
	return 1, nil
}

func TestReadIDXSlowReader(t *testing.T) {
	t.Parallel()
	data := make([]byte, 3*idxFirstChunk+5) // forces the buffer to grow
	for i := range data {
		data[i] = byte(i)
	}
	in := encodeIDX(IDXLabelsMagic, []uint32{uint32(len(data))}, data)
	idx, err := ReadIDXLabels(&oneByteReader{b: in})
	require.NoError(t, err)
	assert.Equal(t, data, idx.Data)
	assert.Equal(t, len(data), cap(idx.Data), "the buffer never grows past what the header promises")
}

// errReader fails after its input.
type errReader struct {
	b   []byte
	err error
}

func (r *errReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, r.err
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

func TestReadIDXReaderError(t *testing.T) {
	t.Parallel()
	boom := errors.New("disk on fire")
	in := encodeIDX(IDXLabelsMagic, []uint32{100}, []byte{1, 2, 3})
	_, err := ReadIDX(&errReader{b: in, err: boom})
	require.ErrorIs(t, err, boom)
	assert.NotErrorIs(t, err, ErrFormat)
	assert.ErrorContains(t, err, "after 11 of 108 bytes")
}

// A header that promises far more than the input holds must not make the
// reader allocate what it promises.
func TestReadIDXLyingHeaderAllocation(t *testing.T) {
	in := encodeIDX(IDXImagesMagic, []uint32{1 << 20, 28, 28}, make([]byte, 1000)) // promises 822 MB
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := ReadIDXImages(bytes.NewReader(in))
	runtime.ReadMemStats(&after)
	var te *TruncatedError
	require.ErrorAs(t, err, &te)
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20), "bytes allocated")
}

func FuzzReadIDX(f *testing.F) {
	f.Add(encodeIDX(IDXLabelsMagic, []uint32{2}, []byte{1, 9}))
	f.Add(encodeIDX(IDXImagesMagic, []uint32{1, 2, 2}, []byte{0, 64, 128, 255}))
	f.Fuzz(func(t *testing.T, in []byte) {
		idx, err := ReadIDX(bytes.NewReader(in))
		if err != nil {
			// A bytes.Reader never fails: every error is about the format.
			require.ErrorIs(t, err, ErrFormat)
			require.Nil(t, idx)
			return
		}
		want := 1
		for _, d := range idx.Dims {
			require.GreaterOrEqual(t, d, 0)
			want *= d
		}
		require.Len(t, idx.Data, want)
		require.Len(t, in, 4+4*len(idx.Dims)+want, "the whole input is the file")
		_, imgErr := ReadIDXImages(bytes.NewReader(in))
		assert.Equal(t, idx.Magic == IDXImagesMagic, imgErr == nil, "ReadIDXImages: %v", imgErr)
		_, lblErr := ReadIDXLabels(bytes.NewReader(in))
		assert.Equal(t, idx.Magic == IDXLabelsMagic, lblErr == nil, "ReadIDXLabels: %v", lblErr)
	})
}
