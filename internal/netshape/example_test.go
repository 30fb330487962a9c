package netshape_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/shoalml/shoal/internal/netshape"
)

// A gRPC server and its client behind one NIC of 1 Gbit/s and 2 ms RTT, as
// a process of a benchmark sets it up: the server's accepted conns and the
// client's dialed conns are shaped, and the NIC counts their bytes. Before
// the benchmark, SelfCheck measures whether this machine can shape at the
// rate (its result varies from run to run; the bytes do not).
func Example() {
	nic, err := netshape.New(netshape.Config{Gbps: 1, RTT: 2 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	defer nic.Close()

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	g := grpc.NewServer()
	healthpb.RegisterHealthServer(g, health.NewServer())
	served := make(chan error, 1)
	go func() { served <- g.Serve(nic.Listener(lis)) }() // server: accepted conns are shaped
	defer func() { g.Stop(); <-served }()

	cc, err := grpc.NewClient(lis.Addr().String(), // client: dialed conns are shaped
		grpc.WithContextDialer(nic.ContextDialer(nil)),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer cc.Close()
	ctx := context.Background()
	h, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		panic(err)
	}
	fmt.Println(h.Status, "through the NIC:", nic.Sent() > 0 && nic.Received() > 0)

	check, err := netshape.SelfCheck(ctx, nic.Config(), 16<<20)
	if err != nil {
		panic(err)
	}
	fmt.Println("self-check moved", check.Bytes, "bytes")
	// Output:
	// SERVING through the NIC: true
	// self-check moved 16777216 bytes
}
