package ps

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/nn"
)

func testModel() (nn.Layout, []float32) {
	var l nn.Layout
	l.Add("fc.weight", 3, 2)
	l.Add("fc.bias", 3)
	v := make([]float32, l.Size())
	for i := range v {
		v[i] = float32(i) - 4.5
	}
	return l, v
}

func TestModelFileRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "model")
	l, v := testModel()
	require.NoError(t, WriteModelFile(path, l, v))
	st, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "the model is the job's: 0600")
	gl, gv, err := ReadModelFile(path)
	require.NoError(t, err)
	assert.True(t, gl.Equal(l), "layout %v, want %v", gl, l)
	assert.Equal(t, v, gv)
	left, err := filepath.Glob(filepath.Join(filepath.Dir(path), ".*"))
	require.NoError(t, err)
	assert.Empty(t, left, "the temporary file is renamed, not left")
}

func TestModelFileRefusesBadFiles(t *testing.T) {
	l, v := testModel()
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	require.NoError(t, WriteModelFile(good, l, v))
	raw, err := os.ReadFile(good)
	require.NoError(t, err)
	cases := map[string]struct {
		data []byte
		want string
	}{
		"empty":     {nil, "not a Shoal model file"},
		"magic":     {append([]byte("SHMODL99"), raw[8:]...), "not a Shoal model file"},
		"truncated": {raw[:len(raw)-9], "bytes"},
		"flipped": {func() []byte {
			b := append([]byte(nil), raw...)
			b[len(b)-8] ^= 1 // a value's bit
			return b
		}(), "checksum"},
		"huge header": {func() []byte {
			b := append([]byte(nil), raw...)
			binary.LittleEndian.PutUint32(b[8:], 1<<30)
			return b
		}(), "header of"},
		"count": {func() []byte {
			b := append([]byte(nil), raw...)
			hlen := binary.LittleEndian.Uint32(b[8:])
			binary.LittleEndian.PutUint64(b[12+hlen:], 1<<40)
			return b
		}(), "floats for a layout of 9"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(dir, name)
			require.NoError(t, os.WriteFile(p, c.data, 0o600))
			_, _, err := ReadModelFile(p)
			require.ErrorIs(t, err, ErrModelFile)
			assert.Contains(t, err.Error(), c.want)
		})
	}
	_, _, err = ReadModelFile(filepath.Join(dir, "missing"))
	require.ErrorIs(t, err, ErrModelFile)
	assert.ErrorIs(t, err, os.ErrNotExist)
}

func TestModelFileRefusesBadHeaders(t *testing.T) {
	for name, head := range map[string]string{
		"no tensors": `{"tensors":[]}`,
		"zero dim":   `{"tensors":[{"name":"a","shape":[0]}]}`,
		"overflow":   `{"tensors":[{"name":"a","shape":[1073741824,1073741824]}]}`,
		"duplicate":  `{"tensors":[{"name":"a","shape":[1]},{"name":"a","shape":[1]}]}`,
		"not json":   `{"tensors":`,
	} {
		_, err := parseModelHeader([]byte(head))
		assert.Error(t, err, name)
	}
}

func TestWriteModelFileRefusesAMismatch(t *testing.T) {
	l, v := testModel()
	err := WriteModelFile(filepath.Join(t.TempDir(), "m"), l, v[:4])
	require.Error(t, err)
	assert.Contains(t, err.Error(), "4 values for a layout of 9 floats")
}
