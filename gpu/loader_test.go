package gpu

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoalml/shoal/internal/dl"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tree makes empty files under a temporary root and returns the root.
func tree(t *testing.T, files ...string) string {
	root := t.TempDir()
	for _, f := range files {
		p := filepath.Join(root, f)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, nil, 0o644))
	}
	return root
}

func planArgs(s dl.Search) []string {
	cands, _ := s.Plan(dl.FileExists)
	var out []string
	for _, c := range cands {
		out = append(out, c.Arg)
	}
	return out
}

func TestSearchOrder(t *testing.T) {
	root := tree(t,
		"mine/libnvrtc.so.13",
		"home/lib64/libnvrtc.so.12",
		"usr/local/cuda-12.8/lib64/libnvrtc.so.12",
		"usr/local/cuda-13.0/lib64/libnvrtc.so.13",
		"usr/local/cuda-13.0/lib64/stubs/libcuda.so.1",
		"opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib/libnvrtc.so.13",
		"opt/torch/.venv/lib/python3.12/site-packages/nvidia/cublas/lib/libcublas.so.12",
	)
	in := func(p string) string { return filepath.Join(root, p) }
	e := searchEnv{libDir: in("mine"), cudaHome: in("home"), glob: func(p string) []string {
		if !strings.HasPrefix(p, root) {
			p = filepath.Join(root, p)
		}
		m, _ := filepath.Glob(p)
		return m
	}}
	cuda, nvrtc, _, cublas := e.searches()
	assert.Equal(t, []string{
		in("mine/libnvrtc.so.13"),
		"libnvrtc.so.13", "libnvrtc.so.12", // the loader's own search
		in("home/lib64/libnvrtc.so.12"),
		in("usr/local/cuda-13.0/lib64/libnvrtc.so.13"), // newest toolkit first
		in("usr/local/cuda-12.8/lib64/libnvrtc.so.12"),
		in("opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib/libnvrtc.so.13"),
	}, planArgs(nvrtc))
	assert.Contains(t, planArgs(cublas), in("opt/torch/.venv/lib/python3.12/site-packages/nvidia/cublas/lib/libcublas.so.12"))

	// The driver: the directory given first, and a stub never loaded.
	cuda.Dirs = append(cuda.Dirs, in("usr/local/cuda-13.0/lib64/stubs"))
	_, tried, err := dl.Find(cuda, dl.FileExists, func(c dl.Candidate) (int, error) {
		return 0, errors.New("refused by the test")
	})
	require.Error(t, err)
	last := tried[len(tried)-1]
	assert.Equal(t, in("usr/local/cuda-13.0/lib64/stubs/libcuda.so.1"), last.Path)
	assert.Contains(t, last.Err, "stub")

	// SHOAL_LIBCUDA names the driver's file.
	e.libCUDA = in("drv/libcuda.so.1")
	cuda, _, _, _ = e.searches()
	assert.Equal(t, in("drv/libcuda.so.1"), planArgs(cuda)[0])
}
