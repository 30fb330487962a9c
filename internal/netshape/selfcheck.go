package netshape

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Check is the result of SelfCheck.
type Check struct {
	// ConfiguredGbps is Config.Gbps; 0 means unlimited.
	ConfiguredGbps float64
	// MeasuredGbps is what one stream achieved: Bytes over Elapsed.
	MeasuredGbps float64
	// Bytes is how much was sent and received.
	Bytes int64
	// Elapsed runs from the first Write to the Read that completed Bytes.
	Elapsed time.Duration
	// Ratio is MeasuredGbps / ConfiguredGbps, or 0 for an unlimited NIC.
	Ratio float64
}

// SelfCheck sends bytes over one TCP stream on 127.0.0.1 from a NIC of cfg
// to another NIC of cfg and measures the rate achieved: close to
// cfg.Gbps when the machine is fast enough to shape at that rate. It
// blocks until done or ctx is done, and leaves no goroutine behind.
func SelfCheck(ctx context.Context, cfg Config, bytes int64) (Check, error) {
	if err := cfg.validate(); err != nil {
		return Check{}, err
	}
	if bytes <= 0 {
		return Check{}, fmt.Errorf("netshape: self-check of %d bytes, want > 0", bytes)
	}
	tx, err := New(cfg)
	if err != nil {
		return Check{}, err
	}
	defer tx.Close()
	rx, err := New(cfg)
	if err != nil {
		return Check{}, err
	}
	defer rx.Close()

	send, recv, err := pair(ctx, tx, rx)
	if err != nil {
		return Check{}, fmt.Errorf("netshape: self-check: %w", err)
	}
	defer send.Close()
	defer recv.Close()
	stop := context.AfterFunc(ctx, func() {
		send.Close()
		recv.Close()
	})
	defer stop()

	var (
		wg      sync.WaitGroup
		sendErr error
	)
	start := time.Now()
	wg.Go(func() {
		buf := make([]byte, 1<<20)
		for left := bytes; left > 0; {
			n, err := send.Write(buf[:min(left, int64(len(buf)))])
			left -= int64(n)
			if err != nil {
				sendErr = err
				return
			}
		}
		sendErr = send.Close() // flushes the delay line
	})
	got, recvErr := readN(recv, bytes)
	elapsed := time.Since(start)
	if recvErr != nil {
		send.Close() // unblocks the sender
		recv.Close()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return Check{}, fmt.Errorf("netshape: self-check: %w", context.Cause(ctx))
	}
	if err := errors.Join(recvErr, sendErr); err != nil {
		return Check{}, fmt.Errorf("netshape: self-check after %d of %d bytes: %w", got, bytes, err)
	}
	c := Check{
		ConfiguredGbps: cfg.Gbps,
		MeasuredGbps:   float64(bytes) * 8 / elapsed.Seconds() / 1e9,
		Bytes:          bytes,
		Elapsed:        elapsed,
	}
	if cfg.Gbps > 0 {
		c.Ratio = c.MeasuredGbps / cfg.Gbps
	}
	return c, nil
}

// pair connects a conn of tx to a conn of rx over 127.0.0.1.
func pair(ctx context.Context, tx, rx *NIC) (send, recv net.Conn, err error) {
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	defer l.Close()
	type accepted struct {
		c   net.Conn
		err error
	}
	ch := make(chan accepted, 1)
	go func() {
		c, err := rx.Listener(l).Accept()
		ch <- accepted{c, err}
	}()
	send, err = tx.DialContext(nil)(ctx, "tcp", l.Addr().String())
	if err != nil {
		l.Close() // unblocks Accept
		<-ch
		return nil, nil, err
	}
	a := <-ch
	if a.err != nil {
		send.Close()
		return nil, nil, a.err
	}
	return send, a.c, nil
}

// readN reads until it has n bytes.
func readN(r io.Reader, n int64) (int64, error) {
	buf := make([]byte, 256<<10)
	var got int64
	for got < n {
		m, err := r.Read(buf[:min(n-got, int64(len(buf)))])
		got += int64(m)
		if err == io.EOF && got < n {
			return got, io.ErrUnexpectedEOF
		}
		if err != nil && got < n {
			return got, err
		}
	}
	return got, nil
}
