package main

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
			var rec computeRecord
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			err := runBenchCompute(context.Background(), tc.args, &bytes.Buffer{}, &stderr)
			require.Error(t, err)
			assert.Contains(t, err.Error()+stderr.String(), tc.want)
		})
	}
}
