package client

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// retry runs call until it succeeds, fails with a code other than
// Unavailable, has been retried for the retry time (or as many times as
// WithRetry caps), or ctx ends. Each attempt gets its own deadline.
func (c *Client) retry(ctx context.Context, what string, call func(ctx context.Context) error) error {
	backoff := c.opts.backoff
	first := time.Now()
	var err error
	for attempt := 1; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, c.opts.callTimeout)
		err = call(cctx)
		cancel()
		if err == nil || status.Code(err) != codes.Unavailable || attempt == c.opts.maxAttempts {
			break
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		if time.Since(first)+wait > c.opts.retryFor {
			err = fmt.Errorf("still unavailable after %d tries in %v: %w", attempt, time.Since(first).Round(time.Millisecond), err)
			break
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s: %w (last error: %w)", what, ctx.Err(), err)
		case <-t.C:
		}
		backoff = min(2*backoff, c.opts.maxBackoff)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}
