package deadline

import (
	"context"
	"time"
)

// Early returns a context that ends a tenth of the time left before ctx's
// deadline (at most a second) ahead of it; without a deadline it ends with
// ctx.
func Early(ctx context.Context) (context.Context, context.CancelFunc) {
	d, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	margin := min(time.Until(d)/10, time.Second)
	return context.WithDeadline(ctx, d.Add(-margin))
}
