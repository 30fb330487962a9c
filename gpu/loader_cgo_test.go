//go:build cgo

package gpu

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeLib builds a shared library exporting the C functions in src.
func fakeLib(t *testing.T, dir, name, src string) string {
	t.Helper()
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("no gcc to build a fake CUDA library: ", err)
	}
	c := filepath.Join(t.TempDir(), "fake.c")
	require.NoError(t, os.WriteFile(c, []byte(src), 0o644))
	out := filepath.Join(dir, name)
	b, err := exec.Command(cc, "-shared", "-fPIC", "-o", out, c).CombinedOutput()
	require.NoError(t, err, string(b))
	return out
}

// TestMissingLibrariesAreErrors loads fake CUDA libraries: one without
// the functions Shoal needs and, when the driver's loads, an NVRTC that is
// missing; each failure is an error naming what was tried, never a crash.
// The search is hermetic: on a machine with CUDA (the H100 of 2026-11-26)
// the loader's own search found the real driver past the fake.
func TestMissingLibrariesAreErrors(t *testing.T) {
	dir := t.TempDir()
	partial := fakeLib(t, dir, "libcuda.so.1", "int cuInit(unsigned f) { return 0; }\n")
	_, err := load(searchEnv{libCUDA: partial, glob: func(string) []string { return nil }, hermetic: true})
	require.ErrorIs(t, err, ErrUnavailable)
	var le *LoadError
	require.ErrorAs(t, err, &le)
	assert.Equal(t, "libcuda", le.Library)
	assert.Contains(t, err.Error(), partial+": lacks cuDriverGetVersion,", "the fake is tried first and its missing symbol named")
	t.Log(err)

	// A driver library with every symbol, but no NVRTC anywhere.
	var src strings.Builder
	for _, s := range (&libs{}).cudaSymbols() {
		src.WriteString("int " + s.name + "(void) { return 100; }\n")
	}
	full := fakeLib(t, t.TempDir(), "libcuda.so.1", src.String())
	_, err = load(searchEnv{libCUDA: full, libDir: dir, glob: func(string) []string { return nil }, hermetic: true})
	require.ErrorAs(t, err, &le)
	if le.Library == "libcuda" {
		t.Fatalf("the full fake driver was not accepted: %v", err)
	}
	if le.Library == "libnvrtc" {
		assert.Contains(t, err.Error(), "libnvrtc.so.13")
		assert.Contains(t, err.Error(), "libnvrtc.so.12")
	}
	t.Log(err)
}
