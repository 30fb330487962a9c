package data

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// encodeIDX builds an idx file: magic, one big-endian uint32 per dimension,
// then data (which need not match the dimensions).
func encodeIDX(magic uint32, dims []uint32, data []byte) []byte {
	var buf bytes.Buffer
	_ = binary.Write(&buf, binary.BigEndian, magic)
	_ = binary.Write(&buf, binary.BigEndian, dims)
	buf.Write(data)
	return buf.Bytes()
}

func gzipBytes(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, err := zw.Write(b)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

// tinyFashion is a small, valid Fashion-MNIST-shaped set: sample i has
// every pixel equal to byte(i·37+k) for set k, and label i%10.
type tinyFashion struct {
	trainN, testN int
}

func (f tinyFashion) images(n, k int) []byte {
	pix := make([]byte, n*28*28)
	for i := range n {
		for j := range 28 * 28 {
			pix[i*28*28+j] = byte(i*37 + k)
		}
	}
	return encodeIDX(IDXImagesMagic, []uint32{uint32(n), 28, 28}, pix)
}

func (f tinyFashion) labels(n int) []byte {
	l := make([]byte, n)
	for i := range l {
		l[i] = byte(i % 10)
	}
	return encodeIDX(IDXLabelsMagic, []uint32{uint32(n)}, l)
}

// files returns the four files' contents by base name.
func (f tinyFashion) files() map[string][]byte {
	return map[string][]byte{
		FashionMNISTTrainImages: f.images(f.trainN, 0),
		FashionMNISTTrainLabels: f.labels(f.trainN),
		FashionMNISTTestImages:  f.images(f.testN, 1),
		FashionMNISTTestLabels:  f.labels(f.testN),
	}
}

// writeFiles writes each file under dir, gzipped (with ".gz") when gz.
func writeFiles(t testing.TB, dir string, files map[string][]byte, gz bool) {
	t.Helper()
	for name, b := range files {
		p := filepath.Join(dir, name)
		if gz {
			b, p = gzipBytes(t, b), p+".gz"
		}
		require.NoError(t, os.WriteFile(p, b, 0o644))
	}
}
