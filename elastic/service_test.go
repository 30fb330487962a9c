package elastic

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// failingListener fails its first Accept, as a listener whose socket
// was closed under it does.
type failingListener struct{ net.Listener }

var errAccept = errors.New("accept: the socket went away")

func (l failingListener) Accept() (net.Conn, error) { return nil, errAccept }

// signalHandler closes logged at the first record.
type signalHandler struct {
	once   sync.Once
	logged chan struct{}
}

func (h *signalHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *signalHandler) Handle(context.Context, slog.Record) error {
	h.once.Do(func() { close(h.logged) })
	return nil
}
func (h *signalHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *signalHandler) WithGroup(string) slog.Handler      { return h }

func TestServeReportsWhatEndedServing(t *testing.T) {
	coord, err := NewCoordinator(CoordinatorConfig{JobID: "j", Self: 0, Initial: 1, MinWorkers: 1, RejoinTimeout: time.Second, Roster: &roster{},
		Listen: func() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }})
	require.NoError(t, err)
	for _, tc := range []struct {
		name    string
		failing bool
	}{
		{"stopped", false},
		{"accept fails", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			var l net.Listener = lis
			if tc.failing {
				l = failingListener{lis}
				defer lis.Close()
			}
			logged := &signalHandler{logged: make(chan struct{})}
			stop := Serve(l, coord, slog.New(logged))
			if tc.failing {
				<-logged.logged // serving ended on its own before stop
			}
			err = stop()
			if tc.failing {
				assert.ErrorIs(t, err, errAccept)
			} else {
				assert.NoError(t, err)
			}
		})
	}
}
