package rpc_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/shoalml/shoal/internal/testcluster"
	pb "github.com/shoalml/shoal/proto/shoalpb"
	"github.com/shoalml/shoal/rpc"
)

// A parameter-server shard served over gRPC until its context ends, as
// `shoal ps` serves one: the health service answers SERVING for the
// ParameterServer, and ending the context drains the calls in flight
// (up to 5 seconds) before Serve returns.
func Example() {
	cores, err := testcluster.NewCores(4, 1, 4, 0.01)
	if err != nil {
		panic(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	g, health := rpc.NewGRPCServer()
	rpc.RegisterPS(g, health, cores[0], nil) // a nil logger discards
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- rpc.Serve(ctx, g, health, lis, 5*time.Second) }()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	h, err := healthpb.NewHealthClient(conn).Check(context.Background(),
		&healthpb.HealthCheckRequest{Service: pb.ParameterServer_ServiceDesc.ServiceName})
	if err != nil {
		panic(err)
	}
	fmt.Println(h.Status)
	stop()
	fmt.Println("drained:", <-served)
	// Output:
	// SERVING
	// drained: <nil>
}
