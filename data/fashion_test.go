package data

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLoadFashionMNISTTiny(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		gz   bool
	}{{name: "plain", gz: false}, {name: "gzipped", gz: true}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			f := tinyFashion{trainN: 5, testN: 3}
			writeFiles(t, dir, f.files(), tt.gz)
			train, test, err := LoadFashionMNIST(dir)
			require.NoError(t, err)
			for _, c := range []struct {
				ds   Dataset
				name string
				n, k int
			}{{ds: train, name: "fashion-mnist/train", n: 5, k: 0}, {ds: test, name: "fashion-mnist/test", n: 3, k: 1}} {
				assert.Equal(t, c.name, c.ds.Name())
				assert.Equal(t, c.n, c.ds.Len())
				assert.Equal(t, 10, c.ds.Classes())
				ch, h, w := c.ds.Shape()
				assert.Equal(t, [3]int{1, 28, 28}, [3]int{ch, h, w})
				idx := []int{c.n - 1, 0}
				x := make([]float32, 2*784)
				y := make([]int32, 2)
				c.ds.Gather(idx, x, y)
				for k, i := range idx {
					p := float64(byte(i*37 + c.k))
					want := float32((p/255 - FashionMNISTMean) / FashionMNISTStd)
					assert.InDelta(t, want, x[k*784], 1e-6, "sample %d first pixel", i)
					assert.Equal(t, x[k*784], x[k*784+783], "sample %d is uniform", i)
					assert.Equal(t, int32(i%10), y[k], "label of sample %d", i)
				}
			}
		})
	}
}

func TestLoadFashionMNISTNormalization(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFiles(t, dir, tinyFashion{trainN: 8, testN: 1}.files(), false)
	tests := []struct {
		name string
		norm Normalization
		want func(p float64) float64
	}{
		{name: "standard", norm: NormalizeStandard, want: func(p float64) float64 { return (p/255 - 0.2860) / 0.3530 }},
		{name: "unit", norm: NormalizeUnit, want: func(p float64) float64 { return p / 255 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			train, _, err := LoadFashionMNISTConfig(FashionMNISTConfig{Dir: dir, Norm: tt.norm})
			require.NoError(t, err)
			x := make([]float32, 8*784)
			y := make([]int32, 8)
			train.Gather([]int{0, 1, 2, 3, 4, 5, 6, 7}, x, y)
			for i := range 8 {
				assert.InDelta(t, tt.want(float64(byte(i*37))), x[i*784], 1e-6, "sample %d", i)
			}
		})
	}
	_, _, err := LoadFashionMNISTConfig(FashionMNISTConfig{Dir: dir, Norm: Normalization(7)})
	assert.ErrorContains(t, err, "unknown normalization 7")
}

func TestLoadFashionMNISTPrefersPlain(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFiles(t, dir, tinyFashion{trainN: 4, testN: 2}.files(), false)
	writeFiles(t, dir, tinyFashion{trainN: 6, testN: 2}.files(), true)
	train, _, err := LoadFashionMNIST(dir)
	require.NoError(t, err)
	assert.Equal(t, 4, train.Len(), "the plain file wins over the gzipped one")
}

func TestLoadFashionMNISTErrors(t *testing.T) {
	t.Parallel()
	good := tinyFashion{trainN: 4, testN: 2}
	tests := []struct {
		name   string
		gz     bool
		modify func(files map[string][]byte) // nil file: not written
		notDir bool                          // load from a missing directory
		isErr  error
		has    []string // the error contains each, after "DIR" becomes the directory
	}{
		{
			name: "missing directory", notDir: true, isErr: fs.ErrNotExist,
			has: []string{"DIR/absent", "apt-get install dataset-fashion-mnist", "--dataset synthetic"},
		},
		{
			name: "missing file", isErr: fs.ErrNotExist,
			modify: func(m map[string][]byte) { m[FashionMNISTTestLabels] = nil },
			has: []string{"neither t10k-labels-idx1-ubyte nor t10k-labels-idx1-ubyte.gz in DIR",
				"apt-get install dataset-fashion-mnist", "--dataset synthetic"},
		},
		{
			name: "bad magic", isErr: ErrFormat,
			modify: func(m map[string][]byte) { m[FashionMNISTTrainImages] = good.labels(4) },
			has:    []string{"DIR/train-images-idx3-ubyte: ", "bad magic 0x00000801", "want 0x00000803 (2051"},
		},
		{
			name: "truncated", isErr: ErrFormat,
			modify: func(m map[string][]byte) { m[FashionMNISTTrainImages] = m[FashionMNISTTrainImages][:1000] },
			has:    []string{"DIR/train-images-idx3-ubyte: truncated: header promises 3152 bytes in all, found 1000"},
		},
		{
			name: "truncated gzipped", gz: true, isErr: ErrFormat,
			modify: func(m map[string][]byte) { m[FashionMNISTTestImages] = m[FashionMNISTTestImages][:1000] },
			has:    []string{"DIR/t10k-images-idx3-ubyte.gz (gunzipped): truncated: header promises 1584 bytes in all, found 1000"},
		},
		{
			name: "gzipped short header", gz: true, isErr: ErrFormat,
			modify: func(m map[string][]byte) { m[FashionMNISTTestLabels] = []byte{0} },
			has:    []string{"DIR/t10k-labels-idx1-ubyte.gz (gunzipped): truncated: header promises 4 bytes in all, found 1"},
		},
		{
			name: "count mismatch", isErr: ErrFormat,
			modify: func(m map[string][]byte) { m[FashionMNISTTrainLabels] = good.labels(3) },
			has:    []string{"DIR/train-images-idx3-ubyte holds 4 images but DIR/train-labels-idx1-ubyte holds 3 labels"},
		},
		{
			name: "label out of range", isErr: ErrFormat,
			modify: func(m map[string][]byte) {
				m[FashionMNISTTestLabels] = encodeIDX(IDXLabelsMagic, []uint32{2}, []byte{3, 10})
			},
			has: []string{"DIR/t10k-labels-idx1-ubyte: label 10 at index 1, want [0, 10)"},
		},
		{
			name: "wrong image size", isErr: ErrFormat,
			modify: func(m map[string][]byte) {
				m[FashionMNISTTrainImages] = encodeIDX(IDXImagesMagic, []uint32{4, 32, 32}, make([]byte, 4*32*32))
			},
			has: []string{"DIR/train-images-idx3-ubyte: images are 32×32, want 28×28"},
		},
		{
			// Refused on its header, before its data is read: a small
			// gzip file can hold the 256 MiB of zeros this promises
			// (here there is none, and the error says so only if the
			// data was read first).
			name: "wrong image size, refused before its data", isErr: ErrFormat,
			modify: func(m map[string][]byte) {
				m[FashionMNISTTrainImages] = encodeIDX(IDXImagesMagic, []uint32{1, 16384, 16384}, nil)
			},
			has: []string{"DIR/train-images-idx3-ubyte: images are 16384×16384, want 28×28"},
		},
		{
			name: "no samples", isErr: ErrFormat,
			modify: func(m map[string][]byte) {
				m[FashionMNISTTestImages] = encodeIDX(IDXImagesMagic, []uint32{0, 28, 28}, nil)
				m[FashionMNISTTestLabels] = encodeIDX(IDXLabelsMagic, []uint32{0}, nil)
			},
			has: []string{"DIR/t10k-images-idx3-ubyte: no images, want at least one"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			files := good.files()
			if tt.modify != nil {
				tt.modify(files)
			}
			for name, b := range files {
				if b == nil {
					delete(files, name)
				}
			}
			writeFiles(t, dir, files, tt.gz)
			load := dir
			if tt.notDir {
				load = filepath.Join(dir, "absent")
			}
			train, test, err := LoadFashionMNIST(load)
			require.Error(t, err)
			assert.Nil(t, train)
			assert.Nil(t, test)
			if tt.isErr != nil {
				assert.ErrorIs(t, err, tt.isErr)
			}
			for _, s := range tt.has {
				assert.Contains(t, err.Error(), replaceDir(s, dir))
			}
		})
	}
}

// Damaged gzip streams, as opposed to intact streams of damaged idx files.
func TestLoadFashionMNISTBadGzip(t *testing.T) {
	t.Parallel()
	f := tinyFashion{trainN: 4, testN: 2}
	noise := make([]byte, 4*784) // incompressible, so that a cut stream yields part of it
	_, _ = rand.NewChaCha8([32]byte{1}).Read(noise)
	stream := gzipBytes(t, encodeIDX(IDXImagesMagic, []uint32{4, 28, 28}, noise))
	badCRC := bytes.Clone(stream)
	badCRC[len(badCRC)-8] ^= 0xff // the CRC-32 of the trailer
	tests := []struct {
		name  string
		gz    []byte
		isErr error
		has   string
	}{
		{name: "not gzip", gz: []byte("plain text"), has: "train-images-idx3-ubyte.gz: want a gzip stream"},
		{name: "cut in the data", gz: stream[:len(stream)/2], isErr: ErrFormat, has: "train-images-idx3-ubyte.gz (gunzipped): truncated: header promises 3152 bytes in all"},
		{name: "cut in the trailer", gz: stream[:len(stream)-4], isErr: io.ErrUnexpectedEOF, has: "(gunzipped): at the end of the 3152 bytes of idx data: unexpected EOF"},
		{name: "bad checksum", gz: badCRC, isErr: gzip.ErrChecksum, has: "train-images-idx3-ubyte.gz (gunzipped): at the end of the 3152 bytes of idx data: gzip: invalid checksum"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			files := f.files()
			delete(files, FashionMNISTTrainImages)
			writeFiles(t, dir, files, true)
			p := filepath.Join(dir, FashionMNISTTrainImages+".gz")
			require.NoError(t, os.WriteFile(p, tt.gz, 0o644))
			_, _, err := LoadFashionMNIST(dir)
			require.Error(t, err)
			if tt.isErr != nil {
				assert.ErrorIs(t, err, tt.isErr)
			}
			assert.ErrorContains(t, err, tt.has)
			assert.ErrorContains(t, err, dir)
		})
	}
}

func replaceDir(s, dir string) string {
	out := ""
	for i := 0; i < len(s); i++ {
		if i+3 <= len(s) && s[i:i+3] == "DIR" {
			out += dir
			i += 2
			continue
		}
		out += s[i : i+1]
	}
	return out
}

// The real dataset, where it is installed.
func TestLoadFashionMNISTReal(t *testing.T) {
	t.Parallel()
	dir := DefaultFashionMNISTDir
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("Fashion-MNIST is not installed (%v); apt-get install dataset-fashion-mnist to run this test", err)
	}
	train, test, err := LoadFashionMNIST(dir)
	require.NoError(t, err)
	assert.Equal(t, 60000, train.Len())
	assert.Equal(t, 10000, test.Len())

	// The first training sample, against the bytes of the files themselves.
	rawLabel := readRaw(t, dir, FashionMNISTTrainLabels, 8, 1)
	rawPix := readRaw(t, dir, FashionMNISTTrainImages, 16, 784)
	x := make([]float32, 784)
	y := make([]int32, 1)
	train.Gather([]int{0}, x, y)
	assert.Equal(t, int32(rawLabel[0]), y[0])
	assert.Equal(t, int32(9), y[0], "the first training sample is an ankle boot")
	assert.Equal(t, "Ankle boot", FashionMNISTLabel(int(y[0])))
	for j, p := range rawPix {
		require.InDelta(t, (float64(p)/255-FashionMNISTMean)/FashionMNISTStd, x[j], 1e-6, "pixel %d", j)
	}

	// Labels are balanced (6,000 of each class) and the normalized pixels
	// have about zero mean and unit variance (checked on the first 15,000
	// samples, to keep the test quick under -race).
	var counts [10]int
	var sum, sumSq float64
	const statN = 15000
	for b := range Batches(train, 5000) {
		for _, l := range b.Y {
			counts[l]++
		}
		if b.Indices[0] >= statN {
			continue
		}
		for _, v := range b.X {
			sum += float64(v)
			sumSq += float64(v) * float64(v)
		}
	}
	for c, n := range counts {
		assert.Equal(t, 6000, n, "class %d", c)
	}
	m := sum / (statN * 784)
	t.Logf("normalized pixels of the first %d samples: mean %.4f, variance %.4f", statN, m, sumSq/(statN*784)-m*m)
	assert.InDelta(t, 0, m, 0.01, "mean")
	assert.InDelta(t, 1, sumSq/(statN*784)-m*m, 0.02, "variance")
}

// readRaw returns n bytes at off of the dataset file base (plain or gz).
func readRaw(t *testing.T, dir, base string, off, n int) []byte {
	t.Helper()
	var r io.Reader
	f, err := os.Open(filepath.Join(dir, base))
	if err != nil {
		f, err = os.Open(filepath.Join(dir, base+".gz"))
		require.NoError(t, err)
		zr, err := gzip.NewReader(bufio.NewReader(f))
		require.NoError(t, err)
		r = zr
	} else {
		r = f
	}
	t.Cleanup(func() { _ = f.Close() })
	_, err = io.CopyN(io.Discard, r, int64(off))
	require.NoError(t, err)
	b := make([]byte, n)
	_, err = io.ReadFull(r, b)
	require.NoError(t, err)
	return b
}
