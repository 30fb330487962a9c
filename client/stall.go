package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	pb "github.com/shoalml/shoal/proto/shoalpb"
)

// Stall is what one shard's waiting pulls wait for (ps.Stall).
type Stall struct {
	Shard   int
	Step    int64
	Workers []int64
	Since   time.Time
	Pulls   int
}

// Stalls asks every shard what its pulls wait for, over the connections
// the pulls do not use, and returns the shards where some wait. A shard
// that does not answer within ctx is left out and its error joined to
// the result's.
func (c *Client) Stalls(ctx context.Context) ([]Stall, error) {
	var out []Stall
	var errs []error
	for i, s := range c.pushStubs {
		resp, err := s.Info(ctx, &pb.InfoRequest{})
		if err != nil {
			errs = append(errs, fmt.Errorf("shard %d at %s: %w", i, c.addrs[i], err))
			continue
		}
		if st := resp.GetStall(); st != nil {
			out = append(out, Stall{Shard: i, Step: st.GetStep(), Workers: st.GetWorkers(), Since: time.Unix(0, st.GetSinceUnixNanos()), Pulls: int(st.GetPulls())})
		}
	}
	return out, errors.Join(errs...)
}
