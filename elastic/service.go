package elastic

import (
	"errors"
	"fmt"
	"log/slog"
	"net"

	"google.golang.org/grpc"

	pb "github.com/shoalml/shoal/proto/shoalpb"
)

// Serve serves coord's Elastic service on lis, with opts, on a goroutine
// that the returned stop owns: stop stops the server, waits for the
// goroutine, and returns the error that ended serving before stop did
// (nil when none did). Such an error is also logged as it happens: the
// members that ask this one to coordinate stop hearing from it, and the
// ring's re-forms fail on their deadlines. Call stop once.
func Serve(lis net.Listener, coord *Coordinator, log *slog.Logger, opts ...grpc.ServerOption) (stop func() error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	srv := grpc.NewServer(opts...)
	pb.RegisterElasticServer(srv, coord)
	served := make(chan error, 1)
	go func() {
		err := srv.Serve(lis)
		if err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			err = fmt.Errorf("elastic: serving the Elastic service on %s: %w", lis.Addr(), err)
			log.Error("the Elastic service stopped serving", "component", "elastic", "err", err)
		} else {
			err = nil
		}
		served <- err
	}()
	return func() error {
		srv.Stop()
		return <-served
	}
}
