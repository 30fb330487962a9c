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

// StreamIdleTimeout is StreamTimeouts without a limit on the whole
// stream.
func StreamIdleTimeout(idle time.Duration) grpc.StreamServerInterceptor {
	return StreamTimeouts(idle, 0)
}

// StreamTimeouts returns a stream interceptor that ends a stream whose
// handler has waited longer than idle in one RecvMsg or SendMsg: a client
// that opened a push and sends nothing, or only its header, or one that
// stops reading a pull. Without it such a stream stays open until the
// client gives up, and any client can hold streams open indefinitely.
// Time the handler spends elsewhere (waiting for other workers, applying
// an update) does not count. With total > 0 it also ends a stream that
// has been open longer than total, whatever it did: a client that
// trickles a byte just inside the idle limit. The stream ends with
// DeadlineExceeded naming the limit; the handler, still blocked in the
// transport, returns once gRPC has closed the stream.
func StreamTimeouts(idle, total time.Duration) grpc.StreamServerInterceptor {
	check := idle
	if total > 0 {
		check = min(idle, total)
	}
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		start := time.Now()
		w := &idleStream{ServerStream: ss}
		done := make(chan error, 1)
		go func() { done <- handler(srv, w) }()
		tick := time.NewTicker(max(check/8, time.Millisecond))
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
				if total > 0 && time.Since(start) > total {
					return status.Errorf(codes.DeadlineExceeded, "%s: the stream was open longer than %v (the stream limit: the longest wait for other workers, plus the step's bytes at 1 MiB/s, plus the idle limit)",
						info.FullMethod, total)
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
