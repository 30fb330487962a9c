package rpc_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/client"
	"github.com/shoalml/shoal/internal/lockedio"
	"github.com/shoalml/shoal/internal/testcluster"
	"github.com/shoalml/shoal/rpc"
)

// TestAWorkerTrainsThroughAConnectionFlood: a loopback process keeps
// twice the shard's --max-connections open, never sending a byte, and
// opens another as soon as the shard closes one (issue 44's attack 2,
// sustained); a worker that connects during the flood still joins and
// completes its push-pulls. Before connections in their handshake gave
// their place to a new one, the flood held every place but for instants
// that the worker's retries did not hit, and the worker never got in.
func TestAWorkerTrainsThroughAConnectionFlood(t *testing.T) {
	l := rpc.Limits{StreamsPerConn: 8, Conns: 8, ConnIdle: time.Minute, Handshake: 500 * time.Millisecond}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	log := lockedio.NewBuffer()
	lis := l.Listener(inner, slog.New(slog.NewTextHandler(log, nil)))
	addr := lis.Addr().String()
	g, health := rpc.NewGRPCServer(l.ServerOptions()...)
	core := testcluster.Cores(t, 8, 1, 4, 0.5)[0]
	rpc.RegisterPS(g, health, core, nil)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- rpc.Serve(ctx, g, health, lis, time.Second) }()
	defer func() { cancel(); <-served }()

	// The flood: each flooder holds one silent connection and opens the
	// next as soon as the shard closes it, until stop.
	stop := make(chan struct{})
	opened := make(chan struct{}, 1<<16)
	var flood sync.WaitGroup
	defer func() { close(stop); flood.Wait() }()
	for range 2 * l.Conns {
		flood.Go(func() {
			for {
				c, err := net.DialTimeout("tcp", addr, 2*time.Second)
				if err == nil {
					select {
					case opened <- struct{}{}:
					default:
					}
					closed := make(chan struct{})
					go func() { io.Copy(io.Discard, c); close(closed) }()
					select {
					case <-closed:
					case <-stop:
					}
					c.Close()
					<-closed
				}
				select {
				case <-stop:
					return
				default:
				}
			}
		})
	}
	// Every flooder has had a connection taken: the shard is at its cap.
	atCap := time.After(30 * time.Second)
	for range 2 * l.Conns {
		select {
		case <-opened:
		case <-atCap:
			require.FailNow(t, "the flood opened fewer than its connections within 30 s")
		}
	}

	wctx, wcancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer wcancel()
	cl, err := client.Dial(wctx, []string{addr})
	require.NoError(t, err, "the worker's dial during the flood")
	defer cl.Close()
	_, err = cl.JoinWorker(wctx, 0)
	require.NoError(t, err)
	params := make([]float32, 8)
	for step := range int64(5) {
		_, err := cl.PushPull(wctx, client.PushPullArgs{PushArgs: client.PushArgs{WorkerID: 0, Step: step, Grads: []float32{1, 1, 1, 1, 1, 1, 1, 1}}, Pull: true, Dst: params})
		require.NoError(t, err, "push-pull of step %d during the flood", step)
	}
	assert.Equal(t, int64(5), core.Clock(), "every push applied")
	assert.Contains(t, log.String(), "closed a connection still in its handshake", "the flood held the shard at its cap")
}
