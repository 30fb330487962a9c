package rpc

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shoalml/shoal/ps"
)

func TestToStatus(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want codes.Code
	}{
		{"nil", nil, codes.OK},
		{"invalid argument", fmt.Errorf("push: %w", ps.ErrInvalidArgument), codes.InvalidArgument},
		{"wrong plan", ps.ErrWrongPlan, codes.FailedPrecondition},
		{"stale step", ps.ErrStale, codes.Aborted},
		{"wait past MaxWait", fmt.Errorf("%w: step 3: %w", ps.ErrWaitTimeout, context.DeadlineExceeded), codes.DeadlineExceeded},
		{"wait the caller canceled", fmt.Errorf("%w: step 3: %w", ps.ErrWaitTimeout, context.Canceled), codes.Canceled},
		{"canceled", context.Canceled, codes.Canceled},
		{"deadline", context.DeadlineExceeded, codes.DeadlineExceeded},
		{"a status passes through", status.Error(codes.Unavailable, "gone"), codes.Unavailable},
		{"anything else", errors.New("bug"), codes.Internal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, status.Code(toStatus(tc.err)))
		})
	}
}
