package node

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
