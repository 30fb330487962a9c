package rpc

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
)

// Serve serves g on lis until ctx ends, then drains it: health reports
// NOT_SERVING, the calls in flight get up to drain to finish, and then g
// stops, ending whatever is left. It returns the error that ended serving
// before ctx did, or nil after a drain. It owns no goroutine once it
// returns.
func Serve(ctx context.Context, g *grpc.Server, health *health.Server, lis net.Listener, drain time.Duration) error {
	serveErr := make(chan error, 1)
	go func() { serveErr <- g.Serve(lis) }()
	select {
	case err := <-serveErr:
		g.Stop()
		return fmt.Errorf("serving on %s: %w", lis.Addr(), err)
	case <-ctx.Done():
	}
	health.Shutdown()
	stopped := make(chan struct{})
	go func() { g.GracefulStop(); close(stopped) }()
	t := time.NewTimer(drain)
	defer t.Stop()
	select {
	case <-stopped:
	case <-t.C:
		g.Stop()
		<-stopped
	}
	<-serveErr
	return nil
}
