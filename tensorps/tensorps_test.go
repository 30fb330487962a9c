package tensorps

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/internal/testcluster"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
	pb "github.com/shoalml/shoal/proto/shoalpb"
	"github.com/shoalml/shoal/ps"
)

func layout() nn.Layout {
	var l nn.Layout
	l.Add("fc.weight", 4, 3)
	l.Add("fc.bias", 4)
	return l
}

// shards serves l's vector initial over 2 shards of 5-float chunks in
// mode for workers workers, with plain SGD at lr 1 (what shoal run
// starts).
func shards(t *testing.T, mode consistency.Mode, workers int, l nn.Layout, initial []float32) []string {
	cfg := ps.DefaultConfig()
	cfg.Mode, cfg.Workers = mode, workers
	cfg.Optimizer = optim.DefaultConfig()
	cfg.Optimizer.Algorithm, cfg.Optimizer.LR, cfg.Optimizer.Momentum = "sgd", 1, 0
	c := testcluster.StartTCP(t, testcluster.CoresWith(t, cfg, l, initial, 2, 5)...)
	return c.Addrs()
}

func config(addrs []string, mode consistency.Mode, rank, size int) Config {
	c := DefaultConfig()
	c.Servers, c.Mode, c.Rank, c.Size = addrs, mode, rank, size
	return c
}

func seq(n int, f func(i int) float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = f(i)
	}
	return v
}

// In sync mode the shards apply the mean of the workers' pushes once per
// step: two workers pushing a and b move the weights by −(a+b)/2, and
// both pull the same weights after it.
func TestSyncStepAppliesTheMeanOfThePushes(t *testing.T) {
	l := layout()
	initial := seq(l.Size(), func(i int) float32 { return float32(i) })
	addrs := shards(t, consistency.Sync, 2, l, initial)
	pushes := [][]float32{seq(l.Size(), func(i int) float32 { return 1 }), seq(l.Size(), func(i int) float32 { return float32(i) })}
	got := make([][]float32, 2)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for r := range 2 {
		wg.Go(func() {
			s, err := Open(t.Context(), config(addrs, consistency.Sync, r, 2), l)
			if err != nil {
				errs[r] = err
				return
			}
			defer s.Close(context.Background())
			w := make([]float32, l.Size())
			if errs[r] = s.Params(t.Context(), w); errs[r] != nil {
				return
			}
			if fmt.Sprint(w) != fmt.Sprint(initial) {
				errs[r] = fmt.Errorf("rank %d began at %v, want the model file's %v", r, w, initial)
				return
			}
			errs[r] = s.Push(t.Context(), pushes[r], w)
			got[r] = w
		})
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	want := seq(l.Size(), func(i int) float32 { return float32(i) - (1+float32(i))/2 })
	assert.Equal(t, want, got[0])
	assert.Equal(t, want, got[1])
}

// In async mode each push is applied alone, at once.
func TestAsyncPushIsAppliedAlone(t *testing.T) {
	l := layout()
	initial := seq(l.Size(), func(i int) float32 { return float32(i) })
	addrs := shards(t, consistency.Async, 0, l, initial)
	s, err := Open(t.Context(), config(addrs, consistency.Async, 0, 2), l)
	require.NoError(t, err)
	defer s.Close(context.Background())
	w := make([]float32, l.Size())
	require.NoError(t, s.Params(t.Context(), w))
	require.NoError(t, s.Push(t.Context(), seq(l.Size(), func(int) float32 { return 2 }), w))
	assert.Equal(t, seq(l.Size(), func(i int) float32 { return float32(i) - 2 }), w)
	assert.Equal(t, int64(1), s.Stats().Steps)
	assert.Equal(t, consistency.Staleness{0: 1}, s.Stats().Staleness)
}

func TestOpenRefusesAnotherModelModeOrWorld(t *testing.T) {
	l := layout()
	addrs := shards(t, consistency.Sync, 2, l, make([]float32, l.Size()))
	var other nn.Layout
	other.Add("fc.weight", 3, 4)
	other.Add("fc.bias", 4)
	_, err := Open(t.Context(), config(addrs, consistency.Sync, 0, 2), other)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "rank 0: the parameter servers hold a model of 2 tensors and 16 floats (fc.weight [4 3], fc.bias [4]), this rank's has 2 tensors and 16 floats (fc.weight [3 4], fc.bias [4]): every rank must build the same model")
	_, err = Open(t.Context(), config(addrs, consistency.SSP, 0, 2), l)
	assert.ErrorContains(t, err, "rank 0: mode ssp, but the parameter servers run mode sync")
	_, err = Open(t.Context(), config(addrs, consistency.Sync, 0, 3), l)
	assert.ErrorContains(t, err, "rank 0 of 3: the parameter servers expect 2 workers")
}

func TestConfigFromEnv(t *testing.T) {
	env := map[string]string{"SHOAL_MODE": "sync", "SHOAL_SERVERS": "127.0.0.1:1,127.0.0.1:2", "SHOAL_RANK": "1", "SHOAL_WORLD_SIZE": "2"}
	cfg, err := ConfigFromEnv(DefaultConfig(), func(k string) string { return env[k] })
	require.NoError(t, err)
	assert.Equal(t, []string{"127.0.0.1:1", "127.0.0.1:2"}, cfg.Servers)
	assert.Equal(t, consistency.Sync, cfg.Mode)
	assert.Equal(t, 1, cfg.Rank)
	assert.Equal(t, 2, cfg.Size)
	assert.Zero(t, cfg.LocalSteps, "a push every step without SHOAL_LOCAL_STEPS")
	env["SHOAL_LOCAL_STEPS"] = "10"
	cfg, err = ConfigFromEnv(DefaultConfig(), func(k string) string { return env[k] })
	require.NoError(t, err)
	assert.Equal(t, 10, cfg.LocalSteps)
	for _, bad := range []string{"-1", "ten", "99999999"} {
		env["SHOAL_LOCAL_STEPS"] = bad
		_, err = ConfigFromEnv(DefaultConfig(), func(k string) string { return env[k] })
		assert.ErrorContains(t, err, "SHOAL_LOCAL_STEPS=\""+bad+"\": want the number of local steps between pushes")
	}
	delete(env, "SHOAL_LOCAL_STEPS")

	env["SHOAL_MODE"] = "ring"
	_, err = ConfigFromEnv(DefaultConfig(), func(k string) string { return env[k] })
	assert.ErrorContains(t, err, "SHOAL_MODE=ring")
	env["SHOAL_MODE"], env["SHOAL_SERVERS"] = "async", ""
	_, err = ConfigFromEnv(DefaultConfig(), func(k string) string { return env[k] })
	assert.ErrorContains(t, err, "SHOAL_SERVERS is empty")
	env["SHOAL_SERVERS"], env["SHOAL_AUTH_TOKEN_FILE"] = "127.0.0.1:1", filepath.Join(t.TempDir(), "missing")
	_, err = ConfigFromEnv(DefaultConfig(), func(k string) string { return env[k] })
	assert.ErrorContains(t, err, "SHOAL_TLS_*/SHOAL_AUTH_TOKEN_FILE")
}

// TestCompressionFromEnv: SHOAL_COMPRESSION (shoal run --compression)
// sets the pushes' encoding; int8 needs local steps; the script's own
// compression is taken where the environment has none, and must agree
// where it has one.
func TestCompressionFromEnv(t *testing.T) {
	base := map[string]string{"SHOAL_MODE": "sync", "SHOAL_SERVERS": "127.0.0.1:1", "SHOAL_RANK": "0", "SHOAL_WORLD_SIZE": "2"}
	cases := []struct {
		name, compression, localSteps string
		script                        pb.Encoding
		want                          pb.Encoding
		error                         string
	}{
		{"unset", "", "", pb.Encoding_FLOAT32, pb.Encoding_FLOAT32, ""},
		{"none", "none", "", pb.Encoding_FLOAT32, pb.Encoding_FLOAT32, ""},
		{"bf16", "bf16", "", pb.Encoding_FLOAT32, pb.Encoding_BFLOAT16, ""},
		{"fp16", "fp16", "", pb.Encoding_FLOAT32, pb.Encoding_FLOAT16, ""},
		{"int8 with local steps", "int8", "5", pb.Encoding_FLOAT32, pb.Encoding_INT8, ""},
		{"int8 without local steps", "int8", "", pb.Encoding_FLOAT32, 0, "SHOAL_COMPRESSION=int8: for pseudo-gradients only, and SHOAL_LOCAL_STEPS is unset"},
		{"unknown", "int4", "", pb.Encoding_FLOAT32, 0, `SHOAL_COMPRESSION="int4": want none, fp16, bf16 or int8`},
		{"the script's alone", "", "", pb.Encoding_FLOAT16, pb.Encoding_FLOAT16, ""},
		{"the script's and the same", "bf16", "", pb.Encoding_BFLOAT16, pb.Encoding_BFLOAT16, ""},
		{"the script's and another", "int8", "5", pb.Encoding_FLOAT16, 0, "the DistributedOptimizer's compression is fp16 and SHOAL_COMPRESSION (shoal run --compression) is int8: give one, or the same"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := maps.Clone(base)
			env["SHOAL_COMPRESSION"], env["SHOAL_LOCAL_STEPS"] = tc.compression, tc.localSteps
			cfg, err := ConfigFromEnv(DefaultConfig(), func(k string) string { return env[k] })
			if err == nil {
				cfg, err = cfg.WithScriptEncoding(tc.script)
			}
			if tc.error != "" {
				assert.ErrorContains(t, err, tc.error)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, cfg.Encoding)
		})
	}
}
