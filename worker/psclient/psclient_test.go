package psclient_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/shoalml/shoal/client"
	"github.com/shoalml/shoal/internal/testcluster"
	"github.com/shoalml/shoal/worker"
	"github.com/shoalml/shoal/worker/psclient"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestServers: every call reaches the servers with its arguments, and the
// results come back in worker's types.
func TestServers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Two shards of an async vector 0..9, SGD with lr 0.5.
	c := testcluster.Start(t, testcluster.Cores(t, 10, 2, 4, 0.5)...)
	cl, err := client.Dial(ctx, c.Addrs(), client.WithDialOptions(c.DialOption()))
	require.NoError(t, err)
	defer cl.Close()
	var s worker.ParameterServers = psclient.New(cl)

	params := make([]float32, 10)
	waited := time.Hour
	clocks, err := s.Pull(ctx, worker.PullArgs{WorkerID: 1, Steps: []int64{0, 0}, Waited: &waited}, params)
	require.NoError(t, err)
	assert.Equal(t, []int64{0, 0}, clocks)
	assert.Equal(t, []float32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, params)
	assert.Less(t, waited, time.Hour, "Waited is set")

	ones := []float32{1, 1, 1, 1, 1, 1, 1, 1, 1, 1}
	res, err := s.Push(ctx, worker.PushArgs{WorkerID: 1, Step: 0, Clocks: clocks, Grads: ones})
	require.NoError(t, err)
	assert.Equal(t, worker.PushResult{Clocks: client.Clocks{1, 1}, Dropped: 0, Staleness: []int64{0, 0}}, res, "the client's result, passed through")

	waited = time.Hour
	pp, err := s.PushPull(ctx, worker.PushPullArgs{
		PushArgs: worker.PushArgs{WorkerID: 1, Step: 1, Clocks: clocks, Grads: ones},
		Steps:    []int64{2, 2}, Dst: params, Waited: &waited,
	})
	require.NoError(t, err)
	assert.Equal(t, []int64{1, 1}, pp.Staleness, "pushed on clocks one update old")
	assert.Equal(t, client.Clocks{2, 2}, pp.PullClocks)
	assert.Equal(t, []float32{-1, 0, 1, 2, 3, 4, 5, 6, 7, 8}, params, "the pull after both pushes")
	assert.Less(t, waited, time.Hour, "Waited is set")
}
