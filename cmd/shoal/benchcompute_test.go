package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/bench/harness"
	"github.com/shoalml/shoal/gpu"
	"github.com/shoalml/shoal/internal/cudaemu"
	"github.com/shoalml/shoal/machine"
)

func TestBenchCompute(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		model   string
		hidden  []int
		backend string // "" for either
	}{
		{"mlp gonum", []string{"--model", "mlp", "--hidden", "16,8", "--batch", "8", "--backend", "gonum"}, "mlp", []int{16, 8}, "cpu/gonum"},
		{"mlp auto", []string{"--model", "mlp", "--hidden", "16", "--batch", "4"}, "mlp", []int{16}, ""},
		{"cnn auto", []string{"--model", "cnn", "--batch", "2"}, "cnn", []int{}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, stderr bytes.Buffer
			args := append(tc.args, "--steps", "2", "--warmup", "1", "--json")
			require.NoError(t, runBenchCompute(context.Background(), args, &out, &stderr), stderr.String())
			var raw map[string]any
			require.NoError(t, json.Unmarshal(out.Bytes(), &raw), out.String())
			for _, k := range []string{"model", "hidden", "batch", "threads", "backend", "steps", "seconds", "samples_per_sec"} {
				assert.Contains(t, raw, k)
			}
			var rec harness.ComputeRecord
			require.NoError(t, json.Unmarshal(out.Bytes(), &rec))
			assert.Equal(t, tc.model, rec.Model)
			assert.Equal(t, tc.hidden, rec.Hidden)
			assert.Equal(t, 2, rec.Steps)
			assert.Equal(t, 1, rec.Threads)
			assert.Positive(t, rec.SamplesPerSec)
			assert.Positive(t, rec.Seconds)
			if tc.backend != "" {
				assert.Equal(t, tc.backend, rec.Backend)
			} else {
				assert.Contains(t, []string{"cpu/openblas", "cpu/gonum"}, rec.Backend)
			}
		})
	}

	t.Run("text", func(t *testing.T) {
		var out bytes.Buffer
		require.NoError(t, runBenchCompute(context.Background(), []string{"--hidden", "8", "--batch", "2", "--steps", "1", "--backend", "gonum"}, &out, &bytes.Buffer{}))
		assert.Regexp(t, `^mlp 784-8-10, batch 2, 1 thread\(s\), cpu/gonum: \d+ samples/s \(1 steps in `, out.String())
	})

	t.Run("sweep", func(t *testing.T) {
		var out bytes.Buffer
		args := []string{"--sweep", "mlp:2,4 cnn:1", "--hidden", "8", "--rounds", "2", "--steps", "1", "--warmup", "0", "--backend", "gonum", "--json"}
		require.NoError(t, runBenchCompute(context.Background(), args, &out, &bytes.Buffer{}))
		var got []string
		for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			var rec harness.ComputeRecord
			require.NoError(t, json.Unmarshal([]byte(line), &rec), line)
			got = append(got, fmt.Sprintf("%d %s%v %d %s %s", rec.Round, rec.Model, rec.Hidden, rec.Batch, rec.Precision, rec.Backend))
		}
		assert.Equal(t, []string{"1 mlp[8] 2 fp32 cpu/gonum", "1 mlp[8] 4 fp32 cpu/gonum", "1 cnn[] 1 fp32 cpu/gonum",
			"2 mlp[8] 2 fp32 cpu/gonum", "2 mlp[8] 4 fp32 cpu/gonum", "2 cnn[] 1 fp32 cpu/gonum"}, got)
	})

	t.Run("canceled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		err := runBenchCompute(ctx, []string{"--hidden", "8", "--batch", "2"}, &bytes.Buffer{}, &bytes.Buffer{})
		assert.ErrorIs(t, err, context.Canceled)
	})
}

func TestBenchComputeErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"bad backend", []string{"--backend", "mkl"}, `--backend "mkl": want auto, openblas or gonum`},
		{"zero batch", []string{"--batch", "0"}, "--batch 0, --steps 100, --warmup 10, --threads 1: want batch, steps, threads >= 1 and warmup >= 0"},
		{"zero threads", []string{"--threads", "0"}, "--threads 0"},
		{"bad model", []string{"--model", "rnn"}, `unknown arch "rnn"`},
		{"bad hidden", []string{"--hidden", "8,x"}, `--hidden "8,x"`},
		{"stray argument", []string{"mlp"}, `unexpected argument "mlp"`},
		{"bad device", []string{"--device", "gpu"}, `device "gpu": want auto, cpu, cuda or cuda:N`},
		{"bad precision", []string{"--precision", "fp8"}, `precision "fp8": want fp32, bf16 or fp16`},
		{"bad sweep", []string{"--sweep", "mlp:64,x"}, `--sweep "mlp:64,x": batch "x" of mlp`},
		{"bad precisions", []string{"--sweep", "mlp:64", "--precisions", "fp32,fp4"}, `--precisions "fp32,fp4"`},
		{"rounds without a sweep", []string{"--rounds", "3"}, "--precisions and --rounds: only with --sweep"},
		{"sweep with a timeline", []string{"--sweep", "mlp:4", "--metrics"}, "--sweep: not with --metrics or --timeline"},
		{"sweep in bf16 on the CPU", []string{"--sweep", "mlp:4", "--device", "cpu", "--precisions", "fp32,bf16"},
			"--precisions bf16: mixed precision runs on a GPU, but mlp computes on cpu/"},
		{"mixed precision on the CPU", []string{"--device", "cpu", "--precision", "bf16"},
			"--precision bf16: mixed precision runs on a GPU, but --device cpu computes on the CPU (--device cpu); use --precision fp32 there"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			err := runBenchCompute(context.Background(), tc.args, &bytes.Buffer{}, &stderr)
			require.Error(t, err)
			assert.Contains(t, err.Error()+stderr.String(), tc.want)
		})
	}
}

// TestDeviceCUDAWithoutAGPU: --device cuda where CUDA cannot be loaded is an
// error that says so; --device auto and cpu compute on the CPU.
func TestDeviceCUDAWithoutAGPU(t *testing.T) {
	if n, err := gpu.Count(); err == nil {
		t.Skipf("SKIP: this machine has %d CUDA device(s)", n)
	}
	err := runBenchCompute(context.Background(), []string{"--device", "cuda", "--hidden", "8", "--steps", "1"}, &bytes.Buffer{}, &bytes.Buffer{})
	require.ErrorIs(t, err, gpu.ErrUnavailable)
	assert.Contains(t, err.Error(), "--device cuda: ")
	// shoal train and shoal worker refuse it before starting anything.
	for _, args := range [][]string{{"train", "--dataset", "synthetic", "--device", "cuda"}, {"worker", "--dataset", "synthetic", "--device", "cuda:1"}} {
		err := run(context.Background(), args, nil, &bytes.Buffer{}, &bytes.Buffer{})
		require.ErrorIs(t, err, gpu.ErrUnavailable, args)
		assert.Contains(t, err.Error(), "--device "+args[4]+": ", args)
	}
	// --precision bf16 or fp16 where --device auto finds no GPU: refused
	// before anything starts, by all three.
	for _, args := range [][]string{{"train", "--dataset", "synthetic", "--precision", "fp16"}, {"worker", "--dataset", "synthetic", "--precision", "bf16"},
		{"bench", "compute", "--precision", "bf16"}} {
		err := run(context.Background(), args, nil, &bytes.Buffer{}, &bytes.Buffer{})
		require.Error(t, err, args)
		assert.Contains(t, err.Error(), "mixed precision runs on a GPU, but --device auto computes on the CPU (--device auto: no usable GPU", args)
	}
	for _, d := range []string{"auto", "cpu"} {
		var out bytes.Buffer
		require.NoError(t, runBenchCompute(context.Background(), []string{"--device", d, "--hidden", "8", "--steps", "1", "--json"}, &out, &bytes.Buffer{}))
		var rec harness.ComputeRecord
		require.NoError(t, json.Unmarshal(out.Bytes(), &rec))
		assert.Contains(t, rec.Backend, "cpu/", d)
	}
}

// TestDeviceCUDAOnTheEmulator runs the real binary with --device cuda
// against the CUDA emulator (internal/cudaemu): shoal info finds the
// "GPU", bench compute times the resident step on it, and shoal train's
// workers train on it in async and ring mode.
func TestDeviceCUDAOnTheEmulator(t *testing.T) {
	dir := t.TempDir()
	if err := cudaemu.Build(dir, gpu.KernelSource()); errors.Is(err, cudaemu.ErrNoCompiler) && os.Getenv("SHOAL_REQUIRE_CLANG") != "1" {
		t.Skipf("SKIP: %v", err)
	} else {
		require.NoError(t, err)
	}
	env := append(os.Environ(), "SHOAL_LIBCUDA="+filepath.Join(dir, "libcuda.so.1"), "SHOAL_CUDA_LIB_DIR="+dir,
		"SHOAL_CUDA_CACHE="+filepath.Join(dir, "cache"))
	shoal := func(args ...string) string {
		cmd := exec.CommandContext(ctxT(t, 3*time.Minute), shoalBin, args...)
		cmd.Env, cmd.Dir = env, t.TempDir()
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		require.NoError(t, err, "shoal %s:\n%s%s", strings.Join(args, " "), out, stderr.String())
		return string(out)
	}

	info := shoal("info", "--json")
	var r machine.Report
	require.NoError(t, json.Unmarshal([]byte(info), &r), info)
	assert.Empty(t, r.GPU.CUDAError)
	require.Len(t, r.GPU.Ranks, 1)
	assert.Equal(t, "cuda:0", r.GPU.Ranks[0].Device)

	for _, prec := range []string{"fp32", "bf16", "fp16"} {
		var rec harness.ComputeRecord
		out := shoal("bench", "compute", "--device", "cuda", "--precision", prec, "--hidden", "32", "--batch", "16", "--steps", "3", "--warmup", "1", "--json")
		require.NoError(t, json.Unmarshal([]byte(out), &rec), out)
		assert.Equal(t, "cuda:0 Shoal CUDA emulator (sm_80)", rec.Backend)
		assert.Equal(t, prec, rec.Precision)
		assert.Equal(t, "on", rec.Graphs, "the steps replayed as CUDA graphs")
		if prec == "fp16" {
			assert.Equal(t, float32(1<<16), rec.LossScale, "4 steps of a small model do not overflow")
		}
	}

	// One process sweeps batches and precisions; --cuda-graphs=false
	// launches op by op.
	out := shoal("bench", "compute", "--device", "cuda", "--sweep", "mlp:4,8", "--precisions", "fp32,bf16", "--hidden", "16",
		"--steps", "3", "--warmup", "1", "--cuda-graphs=false", "--json")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 4, out)
	for _, l := range lines {
		var rec harness.ComputeRecord
		require.NoError(t, json.Unmarshal([]byte(l), &rec), l)
		assert.Equal(t, "off: turned off", rec.Graphs)
		assert.Equal(t, 1, rec.Round)
	}

	for _, tc := range []struct{ mode, precision string }{{"async", "fp32"}, {"ring", "fp32"}, {"sync", "bf16"}, {"ring", "fp16"}} {
		name := tc.mode + " " + tc.precision
		out := shoal("train", "--device", "cuda", "--precision", tc.precision, "--mode", tc.mode, "--workers", "2", "--dataset", "synthetic", "--steps", "40", "--json")
		res := lastJSON(t, out)
		assert.Equal(t, "cuda:0", res["device"], name)
		if tc.precision == "fp32" {
			assert.Contains(t, out, "2 worker(s) on cuda:0,", name)
			assert.NotContains(t, res, "precision", name)
		} else {
			assert.Contains(t, out, "2 worker(s) on cuda:0 in "+tc.precision+",", name)
			assert.Equal(t, tc.precision, res["precision"], name)
		}
		// Synthetic data is easy: 40 steps of a working model learn it.
		assert.Greater(t, res["test_accuracy"], 0.8, "%s: %s", name, out)
	}
}

// --model big is the harness's 25.4M-parameter MLP at batch 16, as shoal
// bench train --models names it; a --batch given wins.
func TestBenchComputeTakesTheHarnessModels(t *testing.T) {
	b, err := parseBenchCompute([]string{"--model", "big"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, []int{16384, 768}, b.spec.Hidden)
	assert.Equal(t, 16, b.cfg.Batch)
	b, err = parseBenchCompute([]string{"--model", "big", "--batch", "4"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 4, b.cfg.Batch)
}
