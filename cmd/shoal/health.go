package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/shoalml/shoal/flags"
)

// runHealth asks a server's gRPC health service whether it serves: exit
// 0 when it answers SERVING. A container image with no shell (Shoal's is
// FROM scratch) runs it as its health check.
func runHealth(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags.NewFlagSet("health", "Asks the gRPC health service at ADDR (a shoal ps) whether it serves; exits 0 if it\nanswers SERVING. Usage: shoal health [flags] HOST:PORT", stderr)
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for the answer")
	service := fs.String("service", "", "the service to ask about (empty: the server as a whole)")
	var sec flags.Sec
	sec.Register(fs)
	if err := flags.ParseArgs(fs, args, 1, "one address HOST:PORT"); err != nil {
		return err
	}
	if err := sec.Load(); err != nil {
		return err
	}
	if err := sec.Creds.CheckDial(fs.Arg(0)); err != nil {
		return err
	}
	if *timeout <= 0 {
		return fmt.Errorf("--timeout %v: want > 0", *timeout)
	}
	addr := fs.Arg(0)
	conn, err := grpc.NewClient(addr, sec.Creds.DialOptions()...)
	if err != nil {
		return fmt.Errorf("shoal health %s: %w", addr, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: *service}, grpc.WaitForReady(true))
	if err != nil {
		return fmt.Errorf("shoal health %s: %w", addr, err)
	}
	if resp.Status != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("shoal health %s: %s", addr, resp.Status)
	}
	fmt.Fprintf(stdout, "%s: %s\n", addr, resp.Status)
	return nil
}
