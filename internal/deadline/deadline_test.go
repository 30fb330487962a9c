package deadline

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestEarly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, tc := range []struct {
			name        string
			left, early time.Duration
		}{
			{"a tenth of a short wait", 5 * time.Second, 500 * time.Millisecond},
			{"at most a second", time.Minute, time.Second},
		} {
			ctx, cancel := context.WithTimeout(t.Context(), tc.left)
			want, _ := ctx.Deadline()
			got, stop := Early(ctx)
			d, ok := got.Deadline()
			assert.True(t, ok, tc.name)
			assert.Equal(t, want.Add(-tc.early), d, tc.name)
			stop()
			cancel()
		}
		ctx, cancel := context.WithCancel(t.Context())
		got, stop := Early(ctx)
		defer stop()
		_, ok := got.Deadline()
		assert.False(t, ok, "no deadline: none added")
		cancel()
		<-got.Done()
	})
}
