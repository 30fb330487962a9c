package collbench

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/shoalml/shoal/collective"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// measureAll runs Measure on every rank of an in-memory group of n.
func measureAll(t *testing.T, n int, op string, bytes int64) (secs []float64, correct []bool) {
	t.Helper()
	return measureAllOver(t, n, op, bytes, nil)
}

// measureAllOver is measureAll with each rank's transport wrapped by wrap
// (when not nil).
func measureAllOver(t *testing.T, n int, op string, bytes int64, wrap func(int, collective.Transport) collective.Transport) (secs []float64, correct []bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	group := collective.NewMemGroup(n)
	secs, correct = make([]float64, n), make([]bool, n)
	errs := make(chan error, n)
	for r := range n {
		go func() {
			defer group[r].Close()
			var tr collective.Transport = group[r]
			if wrap != nil {
				tr = wrap(r, tr)
			}
			c, err := collective.New(tr, collective.DefaultConfig())
			if err == nil {
				secs[r], correct[r], err = Measure(ctx, c, op, bytes, 2, 1)
			}
			errs <- err
		}()
	}
	for range n {
		require.NoError(t, <-errs)
	}
	return secs, correct
}

// TestMeasure: every collective, over 3 ranks, is checked correct on
// every rank, and all ranks report the same (slowest) time.
func TestMeasure(t *testing.T) {
	for _, op := range Ops {
		t.Run(op, func(t *testing.T) {
			secs, correct := measureAll(t, 3, op, 4*3*100)
			for r := range 3 {
				assert.True(t, correct[r], "rank %d", r)
				assert.Positive(t, secs[r])
				assert.Equal(t, secs[0], secs[r], "rank %d agrees on the slowest time", r)
			}
		})
	}
}

// corrupting flips a bit in every message of more than 64 bytes it sends:
// the data of the calls, not the barrier's tokens nor the 4-byte time and
// verdict that Measure agrees on.
type corrupting struct{ collective.Transport }

func (c corrupting) Send(ctx context.Context, peer int, buf []byte) error {
	if len(buf) > 64 {
		b := append([]byte(nil), buf...)
		b[len(b)/2] ^= 0x40
		buf = b
	}
	return c.Transport.Send(ctx, peer, buf)
}

// TestMeasureSeesAWrongResult: when rank 0's data arrives damaged, every
// rank reports the result wrong.
func TestMeasureSeesAWrongResult(t *testing.T) {
	for _, op := range Ops {
		t.Run(op, func(t *testing.T) {
			_, correct := measureAllOver(t, 3, op, 4*3*100, func(r int, tr collective.Transport) collective.Transport {
				if r == 0 {
					return corrupting{tr}
				}
				return tr
			})
			assert.Equal(t, []bool{false, false, false}, correct)
		})
	}
}

func TestBusFactor(t *testing.T) {
	assert.Equal(t, 1.5, BusFactor("allreduce", 4))
	assert.Equal(t, 0.75, BusFactor("allgather", 4))
	assert.Equal(t, 1.0, BusFactor("broadcast", 4))
}

func TestMeasureRefusesAnUnknownOp(t *testing.T) {
	c, err := collective.New(collective.NewMemGroup(1)[0], collective.DefaultConfig())
	require.NoError(t, err)
	_, _, err = Measure(context.Background(), c, "gossip", 16, 1, 0)
	assert.ErrorContains(t, err, `collective "gossip": want one of`)
}

func TestParseSizes(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []int64
		err      bool
	}{
		{"units", "1MiB,4MiB,512KiB,100", []int64{1 << 20, 4 << 20, 512 << 10, 100}, false},
		{"spaces and bytes", " 8B , 1GiB", []int64{8, 1 << 30}, false},
		{"not whole float32s", "6", nil, true},
		{"negative", "-4", nil, true},
		{"not a number", "1MB", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseSizes(tc.in)
			if tc.err {
				assert.ErrorContains(t, err, "want sizes like 1MiB,4MiB,16MiB (whole float32s)")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}
