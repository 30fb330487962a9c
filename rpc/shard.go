package rpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"

	"github.com/shoalml/shoal/ps"
)

// ShardConfig is how a ShardServer serves one parameter-server shard.
type ShardConfig struct {
	// Listener is where it serves; the ShardServer owns it from New on
	// and wraps it with Limits.
	Listener net.Listener
	// Limits bound the connections and the streams on each.
	Limits Limits
	// StreamIdle ends a stream that leaves the shard waiting this long on
	// its client (StreamTimeouts); the lanes of a push-pull wait as long
	// for each other.
	StreamIdle time.Duration
	// Drain is how long calls in flight get to finish at shutdown.
	Drain time.Duration
	// Security are the credentials' server options, first in the chain:
	// a call without the token reaches nothing else.
	Security []grpc.ServerOption
	// Observe are the last server options (metrics interceptors).
	Observe []grpc.ServerOption
	// Logger; nil discards.
	Logger *slog.Logger
}

// ShardServer serves a ps.Server over gRPC, with its health service.
type ShardServer struct {
	core   *ps.Server
	cfg    ShardConfig
	g      *grpc.Server
	health *health.Server
	lis    net.Listener
	total  time.Duration
}

// NewShardServer builds the gRPC server of core on cfg.Listener. A stream
// may last as long as a call may wait for other workers (core's MaxWait)
// plus the time to move the shard's floats both ways at 1 MiB/s plus
// StreamIdle. Serve serves it; a server never served is closed by Close.
func NewShardServer(core *ps.Server, maxWait time.Duration, cfg ShardConfig) *ShardServer {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &ShardServer{core: core, cfg: cfg}
	s.lis = cfg.Limits.Listener(cfg.Listener, cfg.Logger)
	s.total = maxWait + time.Duration(float64(8*core.Floats())/(1<<20)*float64(time.Second)) + cfg.StreamIdle
	opts := append(append([]grpc.ServerOption{}, cfg.Security...), grpc.ChainStreamInterceptor(StreamTimeouts(cfg.StreamIdle, s.total)))
	opts = append(opts, cfg.Limits.ServerOptions()...)
	opts = append(opts, cfg.Observe...)
	s.g, s.health = NewGRPCServer(opts...)
	RegisterPS(s.g, s.health, core, cfg.Logger, WithLaneWait(cfg.StreamIdle))
	return s
}

// Addr is the address it serves on.
func (s *ShardServer) Addr() string { return s.lis.Addr().String() }

// StreamLimit is the longest a stream may last.
func (s *ShardServer) StreamLimit() time.Duration { return s.total }

// GRPC is the server, for metrics to initialize.
func (s *ShardServer) GRPC() *grpc.Server { return s.g }

// Close closes the listener of a server that will not be served.
func (s *ShardServer) Close() error { return s.lis.Close() }

// Serve serves until ctx ends or a checkpoint or the journal fails
// (ps.Server.Failed);
// then it drains (Serve), writes the final checkpoint and closes the
// journal. A failed checkpoint, serving that fails, or a final
// checkpoint or close that fails is its error. It owns no goroutine once
// it returns.
func (s *ShardServer) Serve(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A checkpoint that cannot be written ends the run (unless the shard
	// only warns of it): it must not go on believing it is checkpointed.
	var failure error
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case failure = <-s.core.Failed():
			cancel()
		case <-ctx.Done():
		}
	}()
	err := Serve(ctx, s.g, s.health, s.lis, s.cfg.Drain)
	cancel()
	<-watched
	if err != nil {
		return err
	}
	if failure != nil {
		if errors.Is(failure, ps.ErrJournal) {
			return fmt.Errorf("%w: the shard stopped; a restarted shard replays what the journal holds", failure)
		}
		return fmt.Errorf("%w: the shard stopped (--checkpoint-errors warn logs such failures and serves on)", failure)
	}
	if err := s.core.Checkpoint(); err != nil {
		return fmt.Errorf("final checkpoint: %w", err)
	}
	if err := s.core.Close(); err != nil {
		return fmt.Errorf("closing the journal: %w", err)
	}
	return nil
}
