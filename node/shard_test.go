package node

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/client"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
	"github.com/shoalml/shoal/ps"
	"github.com/shoalml/shoal/rpc"
	"github.com/shoalml/shoal/shard"
)

// lineWriter collects what is written and closes wrote at the first write.
type lineWriter struct {
	mu    sync.Mutex
	b     strings.Builder
	once  sync.Once
	wrote chan struct{}
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.once.Do(func() { close(w.wrote) })
	return w.b.Write(p)
}

func (w *lineWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

func shardConfig(t *testing.T, listen string) ShardConfig {
	l := nn.Layout{Tensors: []nn.Tensor{{Name: "w", Shape: []int{64}}}}
	plan, err := shard.New(l.Size(), 1, 64)
	require.NoError(t, err)
	c := ps.DefaultConfig()
	c.Optimizer = optim.DefaultConfig()
	c.Plan, c.Layout = plan, l
	return ShardConfig{PS: c, Initial: make([]float32, l.Size()), Model: "test", Listen: listen, Drain: time.Second, StreamIdle: time.Minute,
		Limits: rpc.DefaultLimits, ExitWait: time.Minute}
}

func TestRunShardServesUntilItsContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out := &lineWriter{wrote: make(chan struct{})}
	done := make(chan error, 1)
	go func() { done <- RunShard(ctx, shardConfig(t, "127.0.0.1:0"), out) }()
	select {
	case <-out.wrote:
	case err := <-done:
		require.FailNow(t, "RunShard returned before serving", "err: %v", err)
	}
	cancel()
	require.NoError(t, <-done)
	assert.Contains(t, out.String(), "shoal ps: shard 0 of 1 serving test on 127.0.0.1:")
}

func TestRunShardRefusesAnAddressItCannotListenOn(t *testing.T) {
	err := RunShard(t.Context(), shardConfig(t, "127.0.0.1:notaport"), io.Discard)
	assert.ErrorContains(t, err, "--listen 127.0.0.1:notaport")
}

// modelShardConfig is shardConfig with no model of its own: it waits up
// to wait for one at path.
func modelShardConfig(t *testing.T, path string, wait time.Duration) ShardConfig {
	cfg := shardConfig(t, "127.0.0.1:0")
	cfg.PS.Layout, cfg.PS.Plan, cfg.Initial = nn.Layout{}, shard.Plan{}, nil
	cfg.InitFrom, cfg.InitWait = path, wait
	cfg.PlanFor = func(floats int) (shard.Plan, error) { return shard.New(floats, 1, 64) }
	return cfg
}

func TestRunShardTakesItsModelFromAFileWrittenAfterItListens(t *testing.T) {
	path := filepath.Join(t.TempDir(), "model")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out := &lineWriter{wrote: make(chan struct{})}
	done := make(chan error, 1)
	go func() { done <- RunShard(ctx, modelShardConfig(t, path, time.Minute), out) }()
	select {
	case <-out.wrote:
	case err := <-done:
		require.FailNow(t, "RunShard returned before listening", "err: %v", err)
	}
	line := out.String()
	require.Contains(t, line, "waiting up to 1m0s for the model at "+path)
	addr := strings.Fields(strings.SplitN(line, "listening on ", 2)[1])[0]
	addr = strings.TrimSuffix(addr, ",")

	var l nn.Layout
	l.Add("conv.weight", 4, 3, 3, 3)
	l.Add("conv.bias", 4)
	want := make([]float32, l.Size())
	for i := range want {
		want[i] = float32(i) / 7
	}
	require.NoError(t, ps.WriteModelFile(path, l, want))

	c, err := client.Dial(ctx, []string{addr})
	require.NoError(t, err)
	defer c.Close()
	require.Len(t, c.Info().Tensors, 2)
	assert.Equal(t, "conv.weight", c.Info().Tensors[0].Name)
	got := make([]float32, l.Size())
	_, err = c.Pull(ctx, got)
	require.NoError(t, err)
	assert.Equal(t, want, got, "the shard serves the file's values")
	cancel()
	require.NoError(t, <-done)
}

func TestRunShardGivesUpOnAModelThatNeverComes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "model")
	err := RunShard(t.Context(), modelShardConfig(t, path, 100*time.Millisecond), io.Discard)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--init-from "+path+": no model after 100ms")
}

func TestRunShardRefusesACorruptModelFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "model")
	require.NoError(t, os.WriteFile(path, []byte("not a model"), 0o600))
	err := RunShard(t.Context(), modelShardConfig(t, path, time.Minute), io.Discard)
	require.ErrorIs(t, err, ps.ErrModelFile)
}
