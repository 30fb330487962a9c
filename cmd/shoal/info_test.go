package main

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/machine"
)

func TestInfo(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, runInfo(context.Background(), nil, &out, os.Stderr))
	text := out.String()
	for _, want := range []string{"build:    shoal ", "gemm:     cpu/", "threads:  ", "GOMAXPROCS", "gpu:      "} {
		assert.Contains(t, text, want)
	}

	out.Reset()
	require.NoError(t, runInfo(context.Background(), []string{"--json"}, &out, os.Stderr))
	var r machine.Report
	require.NoError(t, json.Unmarshal(out.Bytes(), &r), out.String())
	assert.NotEmpty(t, r.Build.Go)
	assert.Contains(t, []string{"cpu/openblas", "cpu/gonum"}, r.GEMM.Backend)
	assert.NotEmpty(t, r.GEMM.Reason)
	if r.GEMM.Backend == "cpu/openblas" {
		assert.NotEmpty(t, r.GEMM.Path)
		assert.Positive(t, r.Threads.OpenBLAS)
	}
	assert.Positive(t, r.Threads.NumCPU)
	assert.Positive(t, r.Threads.GOMAXPROCS)
	assert.NotEmpty(t, r.GPU.Detail)

	var stderr bytes.Buffer
	assert.ErrorIs(t, runInfo(context.Background(), []string{"extra"}, &out, &stderr), errUsage)
}

func TestInfoBinaryWithoutAndWithNVML(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	cmd := exec.CommandContext(ctx, shoalBin, "info")
	cmd.Env = append(os.Environ(), "SHOAL_NVML="+filepath.Join(t.TempDir(), "libnvidia-ml.so.1"))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "shoal info must exit 0 without a driver: %s", out)
	assert.Contains(t, string(out), "gpu:      no NVIDIA driver: ")
	assert.Contains(t, string(out), "devices:  ")

	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("SKIP: no gcc to build a fake libnvidia-ml: ", err)
	}
	lib := filepath.Join(t.TempDir(), "libnvidia-ml.so.1")
	b, err := exec.CommandContext(ctx, cc, "-shared", "-fPIC", "-o", lib, "../../gpu/testdata/fake_nvml.c").CombinedOutput()
	require.NoError(t, err, string(b))
	cmd = exec.CommandContext(ctx, shoalBin, "info", "--json")
	cmd.Env = append(os.Environ(), "SHOAL_NVML="+lib, "CUDA_VISIBLE_DEVICES=GPU-bbbb")
	out, err = cmd.Output()
	require.NoError(t, err)
	var r machine.Report
	require.NoError(t, json.Unmarshal(out, &r), string(out))
	require.True(t, r.GPU.Driver, r.GPU.Detail)
	require.NotNil(t, r.GPU.NVML)
	assert.Equal(t, "580.65.06", r.GPU.NVML.Driver)
	require.Len(t, r.GPU.NVML.GPUs, 2)
	assert.Equal(t, "Fake H100 80GB HBM3", r.GPU.NVML.GPUs[0].Name)
	assert.Equal(t, []int{1}, r.GPU.Visible, "CUDA_VISIBLE_DEVICES=GPU-bbbb is NVML's GPU 1")
}

// TestBinaryLinksNoBLAS checks that the binary has no link-time dependency
// on a BLAS (OpenBLAS is dlopened), nor on an NVIDIA library.
func TestBinaryLinksNoBLAS(t *testing.T) {
	f, err := elf.Open(shoalBin)
	if err != nil {
		t.Skipf("SKIP: not an ELF binary: %v", err)
	}
	defer f.Close()
	libs, err := f.ImportedLibraries()
	require.NoError(t, err)
	t.Logf("DT_NEEDED: %v", libs)
	for _, l := range libs {
		assert.NotContains(t, l, "blas", "DT_NEEDED %s", l)
		assert.NotContains(t, l, "nvidia", "DT_NEEDED %s", l)
		assert.NotContains(t, l, "cuda", "DT_NEEDED %s", l)
	}
}

// TestStaticBinary builds shoal with CGO_ENABLED=0 (the static binary for
// containers) and checks that info and bench compute work there on gonum.
func TestStaticBinary(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "shoal-static")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "CGO_ENABLED=0 go build: %s", out)

	ctx := ctxT(t, 2*time.Minute)
	out, err = exec.CommandContext(ctx, bin, "info", "--json").Output()
	require.NoError(t, err)
	var r machine.Report
	require.NoError(t, json.Unmarshal(out, &r), string(out))
	assert.False(t, r.Build.Cgo)
	assert.Equal(t, "cpu/gonum", r.GEMM.Backend)
	assert.Contains(t, r.GEMM.Reason, "built without cgo")

	out, err = exec.CommandContext(ctx, bin, "bench", "compute", "--hidden", "8", "--batch", "4", "--steps", "2", "--warmup", "1", "--json").Output()
	require.NoError(t, err)
	var rec computeRecord
	require.NoError(t, json.Unmarshal(out, &rec), string(out))
	assert.Equal(t, "cpu/gonum", rec.Backend)

	cmd := exec.CommandContext(ctx, bin, "bench", "compute", "--backend", "openblas", "--steps", "1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, 1, exit.ExitCode())
	assert.Contains(t, stderr.String(), "--backend openblas: nn: OpenBLAS unavailable: built without cgo")
}

// TestInfoOpenBLASOff runs the binary with SHOAL_OPENBLAS=off: gonum, and
// the reason says so.
func TestInfoOpenBLASOff(t *testing.T) {
	cmd := exec.CommandContext(ctxT(t, time.Minute), shoalBin, "info")
	cmd.Env = append(os.Environ(), "SHOAL_OPENBLAS=off")
	out, err := cmd.Output()
	require.NoError(t, err)
	assert.Contains(t, string(out), "gemm:     cpu/gonum")
	assert.Contains(t, string(out), "SHOAL_OPENBLAS=off")
	assert.Contains(t, string(out), "SHOAL_OPENBLAS=off\n") // listed with the environment too
}
