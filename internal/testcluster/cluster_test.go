package testcluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/client"
	"github.com/shoalml/shoal/internal/testcluster"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// A lost push is tried again by the client and applied exactly once:
// the shard never saw a lost request, and counts the retry of a push
// whose reply was lost as a duplicate.
func TestLosePush(t *testing.T) {
	for _, tc := range []struct {
		name       string
		loss       testcluster.Loss
		pull       bool
		duplicates int64
	}{
		{"request of a push", testcluster.LoseRequest, false, 0},
		{"reply of a push", testcluster.LoseReply, false, 1},
		{"request of a push-pull", testcluster.LoseRequest, true, 0},
		{"reply of a push-pull", testcluster.LoseReply, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testcluster.Start(t, testcluster.Cores(t, 4, 1, 4, 1)...)
			cl, err := client.Dial(ctxT(t), c.Addrs(), client.WithDialOptions(c.DialOption()), client.WithRetry(4, time.Millisecond))
			require.NoError(t, err)
			defer cl.Close()
			_, err = cl.JoinWorker(ctxT(t), 3)
			require.NoError(t, err)
			c.Shard(0).LosePush(3, 1, tc.loss)
			c.Shard(0).LosePush(3, 7, tc.loss) // never pushed: stays pending
			args := client.PushArgs{WorkerID: 3, Step: 1, Clocks: client.Clocks{0}, Grads: []float32{1, 1, 1, 1}}
			dst := make([]float32, 4)
			if tc.pull {
				_, err = cl.PushPull(ctxT(t), client.PushPullArgs{PushArgs: args, Pull: true, Dst: dst})
			} else {
				_, err = cl.Push(ctxT(t), args)
			}
			require.NoError(t, err)
			core := c.Shard(0).Core
			assert.Equal(t, 1, c.Shard(0).Lost())
			assert.Equal(t, int64(1), core.Stats().Pushes, "applied once")
			assert.Equal(t, tc.duplicates, core.Stats().Duplicates)
			assert.Equal(t, int64(1), core.Clock())
			if tc.pull {
				assert.Equal(t, []float32{-1, 0, 1, 2}, dst, "the values after the one push")
			}
		})
	}
}

// Await returns once a push makes its condition true, with no polling:
// the push's answer wakes it.
func TestAwait(t *testing.T) {
	c := testcluster.Start(t, testcluster.Cores(t, 4, 1, 4, 1)...)
	core := c.Shard(0).Core
	pushed := make(chan error, 1)
	waiting := c.Changed()
	go func() {
		cl, err := client.Dial(ctxT(t), c.Addrs(), client.WithDialOptions(c.DialOption()))
		if err != nil {
			pushed <- err
			return
		}
		defer cl.Close()
		_, err = cl.Push(ctxT(t), client.PushArgs{WorkerID: 0, Step: 0, Clocks: client.Clocks{0}, Grads: make([]float32, 4)})
		pushed <- err
	}()
	require.NoError(t, c.Await(ctxT(t), func() bool { return core.Clock() == 1 }))
	<-waiting // closed by the push's answer
	require.NoError(t, <-pushed)

	ctx, cancel := context.WithCancel(ctxT(t))
	cancel()
	assert.ErrorIs(t, c.Await(ctx, func() bool { return false }), context.Canceled)
}
