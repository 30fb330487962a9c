package rpc

import (
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// DefaultStreamIdle is how long a stream may leave the server waiting on
// its client, for the next message or for room to send one, before the
// server ends it (shoal ps --stream-idle-timeout).
const DefaultStreamIdle = 30 * time.Second

// StreamIdleTimeout returns a stream interceptor that ends a stream whose
// handler has waited longer than idle in one RecvMsg or SendMsg: a client
// that opened a push and sends nothing, or only its header, or one that
// stops reading a pull. Without it such a stream stays open until the
// client gives up, and any client can hold streams open indefinitely.
// Time the handler spends elsewhere (waiting for other workers, applying
// an update) does not count. The stream ends with DeadlineExceeded naming
// the limit; the handler, still blocked in the transport, returns once
// gRPC has closed the stream.
func StreamIdleTimeout(idle time.Duration) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		w := &idleStream{ServerStream: ss}
		done := make(chan error, 1)
		go func() { done <- handler(srv, w) }()
		tick := time.NewTicker(max(idle/8, time.Millisecond))
		defer tick.Stop()
		for {
			select {
			case err := <-done:
				return err
			case <-ss.Context().Done():
				// The client went away or its deadline passed: the
				// handler sees the same and returns.
				return <-done
			case <-tick.C:
				if since := w.waiting.Load(); since != 0 && time.Since(time.Unix(0, since)) > idle {
					return status.Errorf(codes.DeadlineExceeded, "%s: the client left the server waiting more than %v (the stream idle limit, shoal ps --stream-idle-timeout) for its next message or for room to send one",
						info.FullMethod, idle)
				}
			}
		}
	}
}

// idleStream notes when its handler waits on the client.
type idleStream struct {
	grpc.ServerStream
	waiting atomic.Int64 // when the current RecvMsg or SendMsg began (unix ns); 0 outside them
}

func (s *idleStream) RecvMsg(m any) error {
	s.waiting.Store(time.Now().UnixNano())
	defer s.waiting.Store(0)
	return s.ServerStream.RecvMsg(m)
}

func (s *idleStream) SendMsg(m any) error {
	s.waiting.Store(time.Now().UnixNano())
	defer s.waiting.Store(0)
	return s.ServerStream.SendMsg(m)
}
