package netshape_test

import (
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/internal/netshape"
)

// BenchmarkRTT measures a 1-byte ping-pong between two NICs over loopback
// and reports the achieved RTT over the configured one.
func BenchmarkRTT(b *testing.B) {
	for _, rtt := range []time.Duration{200 * time.Microsecond, time.Millisecond, 5 * time.Millisecond} {
		b.Run(fmt.Sprintf("rtt=%v", rtt), func(b *testing.B) {
			cfg := netshape.Config{Gbps: 10, RTT: rtt}
			client, server := connect(b, newNIC(b, cfg), newNIC(b, cfg))
			go func() {
				buf := make([]byte, 1)
				for {
					if _, err := io.ReadFull(server, buf); err != nil {
						return
					}
					if _, err := server.Write(buf); err != nil {
						return
					}
				}
			}()
			buf := make([]byte, 1)
			start := time.Now()
			for b.Loop() {
				_, err := client.Write(buf)
				require.NoError(b, err)
				_, err = io.ReadFull(client, buf)
				require.NoError(b, err)
			}
			got := time.Since(start) / time.Duration(b.N)
			b.ReportMetric(float64(got)/float64(rtt), "rtt-ratio")
		})
	}
}

// BenchmarkFanIn sends from several workers, each with its own NIC, to one
// server NIC of the same rate, and reports the server's achieved rate over
// the configured one: about 1, since the server's ingress is shared.
func BenchmarkFanIn(b *testing.B) {
	const gbps, workers, perWorker = 4, 4, 16 << 20
	cfg := netshape.Config{Gbps: gbps}
	b.SetBytes(workers * perWorker)
	var ratio float64
	for b.Loop() {
		server := newNIC(b, cfg)
		l := listen(b, server)
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				w := newNIC(b, cfg)
				c, err := w.DialContext(nil)(b.Context(), "tcp", l.Addr().String())
				if err != nil {
					b.Error(err)
					return
				}
				if _, err := c.Write(make([]byte, perWorker)); err != nil {
					b.Error(err)
				}
				c.Close()
			})
		}
		start := time.Now()
		var recv sync.WaitGroup
		for range workers {
			c, err := l.Accept()
			require.NoError(b, err)
			recv.Go(func() {
				defer c.Close()
				if _, err := io.Copy(io.Discard, struct{ net.Conn }{c}); err != nil {
					b.Error(err)
				}
			})
		}
		recv.Wait()
		elapsed := time.Since(start)
		wg.Wait()
		ratio += float64(server.Received()) * 8 / elapsed.Seconds() / 1e9 / gbps
	}
	b.ReportMetric(ratio/float64(b.N), "ratio")
}
