package rawtcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"sync"
	"time"
)

// ErrInvalidConfig is wrapped by the error Measure returns for a Config it
// cannot use.
var ErrInvalidConfig = errors.New("rawtcp: invalid config")

// ErrMismatch is wrapped by the error Measure returns when the checked
// round trip brought back other bytes than it sent.
var ErrMismatch = errors.New("rawtcp: echoed bytes differ")

// MaxBytes is the largest Bytes a Config may ask for (each side holds one
// buffer of that size).
const MaxBytes = 1 << 30

// Config says what Measure measures.
type Config struct {
	// Bytes is what each direction carries per round trip, in [1, MaxBytes].
	Bytes int
	// Iters is the number of timed round trips, at least 1.
	Iters int
	// Warmup is the number of untimed round trips before them, at least 0.
	Warmup int
	// Addr is where the server listens, a TCP host:port ("127.0.0.1:0":
	// a free loopback port).
	Addr string
}

// DefaultConfig is 1 MiB each way, 50 timed round trips after 5 warm-up
// ones, on a free loopback port.
func DefaultConfig() Config {
	return Config{Bytes: 1 << 20, Iters: 50, Warmup: 5, Addr: "127.0.0.1:0"}
}

func (c Config) validate() error {
	var errs []error
	if c.Bytes < 1 || c.Bytes > MaxBytes {
		errs = append(errs, fmt.Errorf("bytes %d, want 1 to %d", c.Bytes, MaxBytes))
	}
	if c.Iters < 1 {
		errs = append(errs, fmt.Errorf("iters %d, want >= 1", c.Iters))
	}
	if c.Warmup < 0 {
		errs = append(errs, fmt.Errorf("warmup %d, want >= 0", c.Warmup))
	}
	if c.Addr == "" {
		errs = append(errs, errors.New("addr empty, want host:port such as 127.0.0.1:0"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}

// Result is what Measure found. The times are of whole round trips.
type Result struct {
	// Bytes each way per round trip, Iters timed and Warmup untimed trips.
	Bytes, Iters, Warmup int
	// Sent and Received count what the client wrote and read over the
	// whole run: warm-up, timed and checked trips, Bytes each per trip.
	Sent, Received int64
	// Echoed counts what the server wrote back.
	Echoed int64
	// Nearest-rank percentiles, the mean and the extremes of the timed
	// round trips.
	Median, P10, P90, Mean, Min, Max time.Duration
	// GBps is both directions' bytes over the median round trip,
	// 2·Bytes / Median, in 10⁹ bytes per second.
	GBps float64
}

// Measure times cfg.Iters round trips of cfg.Bytes each way over one TCP
// connection to a server it starts at cfg.Addr (see the package doc). It
// blocks until they are done, ctx ends (the connection is closed and
// ctx's error returned) or the connection fails.
func Measure(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.validate(); err != nil {
		return Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	var lc net.ListenConfig
	lis, err := lc.Listen(ctx, "tcp", cfg.Addr)
	if err != nil {
		return Result{}, fmt.Errorf("rawtcp: listening on %s: %w", cfg.Addr, err)
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		peer     net.Conn
		echoed   int64
		echoErr  error
		accepted = make(chan struct{})
	)
	wg.Go(func() {
		defer close(accepted)
		c, err := lis.Accept()
		lis.Close() // one connection only
		if err != nil {
			echoErr = fmt.Errorf("rawtcp: accepting: %w", err)
			return
		}
		mu.Lock()
		peer = c
		mu.Unlock()
		echoed, echoErr = echo(c, cfg.Bytes)
	})
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", lis.Addr().String())
	if err != nil {
		lis.Close()
		wg.Wait()
		return Result{}, fmt.Errorf("rawtcp: dialling %s: %w", lis.Addr(), err)
	}
	// Closing both ends unblocks every read and write, the server's too.
	closeAll := func() {
		conn.Close()
		mu.Lock()
		if peer != nil {
			peer.Close()
		}
		mu.Unlock()
		lis.Close()
	}
	stop := context.AfterFunc(ctx, closeAll)
	res, err := roundTrips(conn, cfg)
	stop()
	if err == nil {
		// The server sees EOF and ends.
		err = conn.(*net.TCPConn).CloseWrite()
	}
	if err != nil {
		closeAll()
	}
	wg.Wait()
	closeAll()
	if ctx.Err() != nil {
		return Result{}, ctx.Err()
	}
	if err != nil {
		return Result{}, err
	}
	if echoErr != nil {
		return Result{}, echoErr
	}
	res.Echoed = echoed
	return res, nil
}

// echo reads n bytes at a time from c and writes them back, until the
// client closes its side at a round trip's boundary.
func echo(c net.Conn, n int) (int64, error) {
	buf := make([]byte, n)
	var total int64
	for {
		if _, err := io.ReadFull(c, buf); err != nil {
			if errors.Is(err, io.EOF) {
				return total, nil // the client is done
			}
			return total, fmt.Errorf("rawtcp: server reading: %w", err)
		}
		w, err := c.Write(buf)
		total += int64(w)
		if err != nil {
			return total, fmt.Errorf("rawtcp: server writing: %w", err)
		}
	}
}

// roundTrips is the client's side: warm-up, timed and checked trips.
func roundTrips(c net.Conn, cfg Config) (Result, error) {
	out := make([]byte, cfg.Bytes)
	in := make([]byte, cfg.Bytes)
	fill(out, 0)
	res := Result{Bytes: cfg.Bytes, Iters: cfg.Iters, Warmup: cfg.Warmup}
	trip := func() error {
		w, err := c.Write(out)
		res.Sent += int64(w)
		if err != nil {
			return fmt.Errorf("rawtcp: client writing: %w", err)
		}
		r, err := io.ReadFull(c, in)
		res.Received += int64(r)
		if err != nil {
			return fmt.Errorf("rawtcp: client reading: %w", err)
		}
		return nil
	}
	for range cfg.Warmup {
		if err := trip(); err != nil {
			return res, err
		}
	}
	times := make([]time.Duration, cfg.Iters)
	for i := range times {
		t0 := time.Now()
		if err := trip(); err != nil {
			return res, err
		}
		times[i] = time.Since(t0)
	}
	fill(out, 1)
	if err := trip(); err != nil {
		return res, err
	}
	if i := mismatch(out, in); i >= 0 {
		return res, fmt.Errorf("%w: byte %d of %d came back as %d, want %d", ErrMismatch, i, len(out), in[i], out[i])
	}
	summarise(&res, times)
	return res, nil
}

// fill writes a pattern that differs from byte to byte and from seed to
// seed.
func fill(b []byte, seed int) {
	for i := range b {
		b[i] = byte(i*7 + seed*13 + i>>8)
	}
}

// mismatch is the first index where a and b differ, or -1.
func mismatch(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return len(a)
}

// summarise fills res's statistics from the timed round trips.
func summarise(res *Result, times []time.Duration) {
	s := slices.Clone(times)
	slices.Sort(s)
	rank := func(p float64) time.Duration { return s[max(0, int(math.Ceil(p*float64(len(s))))-1)] }
	var total time.Duration
	for _, t := range s {
		total += t
	}
	res.Median, res.P10, res.P90 = rank(0.5), rank(0.1), rank(0.9)
	res.Mean, res.Min, res.Max = total/time.Duration(len(s)), s[0], s[len(s)-1]
	if res.Median > 0 {
		res.GBps = 2 * float64(res.Bytes) / res.Median.Seconds() / 1e9
	}
}

// Record is a Result as `shoal bench tcp --json` prints it: times in
// seconds.
type Record struct {
	Bytes    int     `json:"bytes"`
	Iters    int     `json:"iters"`
	Warmup   int     `json:"warmup"`
	Median   float64 `json:"median_seconds"`
	P10      float64 `json:"p10_seconds"`
	P90      float64 `json:"p90_seconds"`
	Mean     float64 `json:"mean_seconds"`
	GBps     float64 `json:"gbps"`
	Sent     int64   `json:"sent"`
	Received int64   `json:"received"`
}

// Record is r as `shoal bench tcp --json` prints it.
func (r Result) Record() Record {
	return Record{Bytes: r.Bytes, Iters: r.Iters, Warmup: r.Warmup, Median: r.Median.Seconds(), P10: r.P10.Seconds(),
		P90: r.P90.Seconds(), Mean: r.Mean.Seconds(), GBps: r.GBps, Sent: r.Sent, Received: r.Received}
}

// String is r in one line, as `shoal bench tcp` prints it.
func (r Result) String() string {
	return fmt.Sprintf("tcp round trip, %d bytes each way, one loopback connection: median %v (p10 %v, p90 %v), %.2f GB/s; %d round trips after %d warm-up",
		r.Bytes, r.Median.Round(time.Microsecond), r.P10.Round(time.Microsecond), r.P90.Round(time.Microsecond), r.GBps, r.Iters, r.Warmup)
}
