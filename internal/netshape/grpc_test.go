package netshape_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/shoalml/shoal/internal/netshape"
)

// TestGRPCHealth runs a gRPC health check through a shaped listener and a
// shaped dialer.
func TestGRPCHealth(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  netshape.Config
	}{
		{"unlimited", netshape.Config{}},
		{"1 Gbps with RTT", netshape.Config{Gbps: 1, RTT: 2 * time.Millisecond}},
		{"small bursts", netshape.Config{Gbps: 0.1, RTT: time.Millisecond, Burst: 1500}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			server, client := newNIC(t, tc.cfg), newNIC(t, tc.cfg)
			l := listen(t, server)
			srv := grpc.NewServer()
			healthpb.RegisterHealthServer(srv, health.NewServer())
			served := make(chan error, 1)
			go func() { served <- srv.Serve(l) }()
			defer func() {
				srv.Stop()
				assert.NoError(t, <-served)
			}()

			cc, err := grpc.NewClient("passthrough:///"+l.Addr().String(),
				grpc.WithContextDialer(client.ContextDialer(nil)),
				grpc.WithTransportCredentials(insecure.NewCredentials()))
			require.NoError(t, err)
			defer cc.Close()
			resp, err := healthpb.NewHealthClient(cc).Check(t.Context(), &healthpb.HealthCheckRequest{})
			require.NoError(t, err)
			assert.Equal(t, healthpb.HealthCheckResponse_SERVING, resp.GetStatus())
			assert.Positive(t, client.Sent())
			assert.Positive(t, server.Received())
		})
	}
}
