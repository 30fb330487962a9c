package metrics

import (
	"context"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"
)

// GRPC exports a gRPC server's calls (grpc_server_started_total,
// grpc_server_handled_total by code, grpc_server_handling_seconds, the
// messages each way: go-grpc-middleware's Prometheus provider) and the
// bytes its messages carried on the wire (shoal_grpc_server_received_bytes_total,
// shoal_grpc_server_sent_bytes_total).
type GRPC struct {
	calls          *grpcprom.ServerMetrics
	received, sent prometheus.Counter
}

// NewGRPC registers the gRPC server metrics on reg.
func NewGRPC(reg prometheus.Registerer) *GRPC {
	g := &GRPC{
		calls: grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram(grpcprom.WithHistogramBuckets(PhaseBuckets))),
		received: prometheus.NewCounter(prometheus.CounterOpts{Name: "shoal_grpc_server_received_bytes_total",
			Help: "Bytes of the gRPC messages the server received, as sent on the wire (compressed, with gRPC's framing)."}),
		sent: prometheus.NewCounter(prometheus.CounterOpts{Name: "shoal_grpc_server_sent_bytes_total",
			Help: "Bytes of the gRPC messages the server sent, as sent on the wire."}),
	}
	reg.MustRegister(g.calls, g.received, g.sent)
	return g
}

// ServerOptions are the interceptors and the stats handler to give
// grpc.NewServer.
func (g *GRPC) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(g.calls.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(g.calls.StreamServerInterceptor()),
		grpc.StatsHandler(byteCounter{g}),
	}
}

// Initialize makes every method of s appear with zero counts before its
// first call (call it after registering the services).
func (g *GRPC) Initialize(s *grpc.Server) { g.calls.InitializeMetrics(s) }

// byteCounter counts the wire bytes of each message (a stats.Handler).
type byteCounter struct{ g *GRPC }

func (b byteCounter) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (b byteCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (b byteCounter) HandleConn(context.Context, stats.ConnStats)                       {}

func (b byteCounter) HandleRPC(_ context.Context, s stats.RPCStats) {
	switch p := s.(type) {
	case *stats.InPayload:
		b.g.received.Add(float64(p.WireLength))
	case *stats.OutPayload:
		b.g.sent.Add(float64(p.WireLength))
	}
}
