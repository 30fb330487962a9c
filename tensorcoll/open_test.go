package tensorcoll_test

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/tensorcoll"
)

// TestOpenOverLoopback forms a group of two through collnet's rendezvous
// and checks that the ranks find each other on one host and reduce.
func TestOpenOverLoopback(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	master := l.Addr().String()
	require.NoError(t, l.Close())
	ss := make([]*tensorcoll.Session, 2)
	errs := make([]error, 2)
	done := make(chan int, 2)
	for rank := range 2 {
		go func() {
			cfg := tensorcoll.DefaultConfig()
			// The launcher's local rank and size are replaced by the group's.
			cfg.Rank, cfg.Size, cfg.LocalRank, cfg.LocalSize, cfg.Master = rank, 2, 0, 1, master
			cfg.ConnectTimeout, cfg.CallTimeout, cfg.JobID = 30*time.Second, 30*time.Second, t.Name()
			ss[rank], errs[rank] = tensorcoll.Open(t.Context(), cfg)
			done <- rank
		}()
	}
	<-done
	<-done
	for rank := range 2 {
		require.NoError(t, errs[rank])
		t.Cleanup(func() { ss[rank].Close() })
		assert.Equal(t, rank, ss[rank].Config().LocalRank)
		assert.Equal(t, 2, ss[rank].Config().LocalSize)
	}
	out := make([][]float32, 2)
	errs = each(ss, func(rank int, s *tensorcoll.Session) error {
		d := bytesOf([]float32{float32(rank), 1})
		_, err := s.Do(t.Context(), tensorcoll.Request{Kind: tensorcoll.KindAllreduce, Name: "x", Data: d, DType: tensorcoll.Float32, Op: tensorcoll.Sum})
		out[rank] = valuesOf[float32](d)
		return err
	})
	for rank := range 2 {
		require.NoError(t, errs[rank])
		assert.Equal(t, []float32{1, 2}, out[rank])
	}
}
