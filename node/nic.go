package node

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"

	"google.golang.org/grpc"

	"github.com/shoalml/shoal/cluster"
	"github.com/shoalml/shoal/collective"
	"github.com/shoalml/shoal/internal/netshape"
	"github.com/shoalml/shoal/nn"
)

// shaped reports whether c models a NIC.
func shaped(c netshape.Config) bool { return c.Gbps > 0 || c.RTT > 0 }

// newNIC is this process's NIC: shaped as c says, or unlimited (it then
// only counts bytes).
func newNIC(c netshape.Config) (*netshape.NIC, error) {
	nic, err := netshape.New(c)
	if err != nil {
		return nil, fmt.Errorf("--nic-gbps %g --rtt %v: %w", c.Gbps, c.RTT, err)
	}
	return nic, nil
}

// grpcDialer routes a client's connections through nic.
func grpcDialer(nic *netshape.NIC) grpc.DialOption {
	return grpc.WithContextDialer(nic.ContextDialer(&net.Dialer{}))
}

// fingerprint identifies a model's parameter vector in gossip metadata.
func fingerprint(l nn.Layout) uint64 { return cluster.Fingerprint(fmt.Sprint(l)) }

// countingTransport counts the payload bytes a collective transport moves
// (shared-memory links included, which no NIC sees).
type countingTransport struct {
	collective.Transport
	sent, received atomic.Int64
	// The transfers under way, for the stall inspector.
	send, recv pending
}

// newCountingTransport counts what t carries.
func newCountingTransport(t collective.Transport) *countingTransport {
	return &countingTransport{Transport: t, send: pending{what: "sending to it"}, recv: pending{what: "receiving from it"}}
}

func (c *countingTransport) Send(ctx context.Context, peer int, buf []byte) error {
	c.send.begin(peer)
	defer c.send.end()
	err := c.Transport.Send(ctx, peer, buf)
	if err == nil {
		c.sent.Add(int64(len(buf)))
	}
	return err
}

func (c *countingTransport) Recv(ctx context.Context, peer int, buf []byte) error {
	c.recv.begin(peer)
	defer c.recv.end()
	err := c.Transport.Recv(ctx, peer, buf)
	if err == nil {
		c.received.Add(int64(len(buf)))
	}
	return err
}
