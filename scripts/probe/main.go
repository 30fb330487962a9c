// Command probe replays the attacks of issue 44 (items 1 to 5) against a
// live Shoal run on loopback. It is a test tool, not part of the shoal
// binary: run it with `go run ./scripts/probe <attack> [flags]`, or through
// scripts/probe/run.sh, which starts the runs, finds their addresses and
// prints each run's final accuracy beside an undisturbed one
// (docs/PROBE.md).
//
// Attacks:
//
//	gossip    -join G                  join G's gossip without the job's key, announce shard 0 at 127.0.0.1:1
//	conns     -addr S -n N             hold N idle TCP connections to shard S, then try a real gRPC call
//	flood     -addr S -n N -hold D     keep N silent TCP connections to shard S for D, each reopened as soon as the shard closes it; a real gRPC call every 250 ms
//	          [-http2]                 each connection first completes the HTTP/2 handshake (preface and SETTINGS), then never calls
//	          [-health check|watch]    each connection makes one health Check (or holds a health Watch open: the health service needs no token), then never calls
//	reform    -addrs A,B,.. -n N       send N forged Elastic.Reform requests to each address
//	session   -addr S                  push and pull as worker 0 without its session, at a far-ahead step
//	hijack    -addr S                  join as worker 0 (ending its session) and push far ahead: the documented limit
//	malformed -addr S -gossip G        malformed pushes to S, junk UDP/TCP packets to gossip G
//	metrics   -url U                   print U's refusal counters
//
// Every address must be on loopback: the probe refuses any other.
package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/shoalml/shoal/cluster"
	pb "github.com/shoalml/shoal/proto/shoalpb"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: probe gossip|conns|flood|reform|session|malformed|metrics [flags]")
		os.Exit(2)
	}
	cmd, args := os.Args[1], os.Args[2:]
	fs := flag.NewFlagSet(cmd, flag.ExitOnError)
	join := fs.String("join", "", "gossip address of a member of the job (host:port)")
	gossip := fs.String("gossip", "", "gossip address to send junk packets to")
	addr := fs.String("addr", "", "a shard's gRPC address")
	addrs := fs.String("addrs", "", "comma-separated addresses (reform)")
	n := fs.Int("n", 0, "how many connections, requests or packets (0: the attack's default)")
	hold := fs.Duration("hold", 20*time.Second, "how long to hold the connections or the fake member")
	url := fs.String("url", "", "a /metrics URL")
	asWorker := fs.Int64("join-as", -1, "malformed: first join as this worker id (ending its session) so that the pushes carry a session and reach the shape checks")
	http2 := fs.Bool("http2", false, "flood: complete the HTTP/2 handshake on each connection, then never call")
	healthCall := fs.String("health", "", "flood: on each connection make one health Check (check) or hold a health Watch (watch), then never call")
	fs.Parse(args)

	var err error
	switch cmd {
	case "gossip":
		err = attackGossip(*join, *hold)
	case "conns":
		err = attackConns(*addr, def(*n, 1100), *hold)
	case "flood":
		err = attackFlood(*addr, def(*n, 64), *hold, *http2, *healthCall)
	case "reform":
		err = attackReform(strings.Split(*addrs, ","), def(*n, 40))
	case "session":
		err = attackSession(*addr)
	case "hijack":
		err = attackHijack(*addr)
	case "malformed":
		err = attackMalformed(*addr, *gossip, def(*n, 2000), *asWorker)
	case "metrics":
		err = printMetrics(*url)
	default:
		err = fmt.Errorf("unknown attack %q", cmd)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		os.Exit(1)
	}
}

func def(v, d int) int {
	if v > 0 {
		return v
	}
	return d
}

// loopback refuses any address that is not on loopback.
func loopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("address %q: %w", addr, err)
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("address %q is not on loopback: the probe only attacks loopback", addr)
	}
	return nil
}

func dial(addr string) (*grpc.ClientConn, error) {
	if err := loopback(addr); err != nil {
		return nil, err
	}
	return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// attackGossip (item 1): join the job's gossip without its key and
// announce shard 0 at 127.0.0.1:1.
func attackGossip(join string, hold time.Duration) error {
	if err := loopback(join); err != nil {
		return err
	}
	cfg := cluster.DefaultConfig()
	cfg.Name = "ps-0"
	cfg.BindAddr = "127.0.0.1"
	cfg.Meta = cluster.Meta{Role: cluster.RolePS, Rank: 0, GRPCAddr: "127.0.0.1:1"}
	m, err := cluster.New(cfg)
	if err != nil {
		return err
	}
	defer m.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = m.Join(ctx, []string{join})
	fmt.Printf("gossip: join %s without the key as ps-0 (shard 0 at 127.0.0.1:1): err=%v\n", join, err)
	time.Sleep(hold)
	fmt.Printf("gossip: members seen after %v: %d\n", hold, len(m.View().Members))
	return nil
}

// attackConns (item 2): hold n idle TCP connections to a shard (they never
// send a byte), then make real gRPC calls to it until one succeeds, and
// report when the shard closed the idle ones.
func attackConns(addr string, n int, hold time.Duration) error {
	if err := loopback(addr); err != nil {
		return err
	}
	var conns []net.Conn
	var failed int
	t0 := time.Now()
	for i := 0; i < n; i++ {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			failed++
			continue
		}
		conns = append(conns, c)
	}
	fmt.Printf("conns: opened %d idle TCP connections to %s in %v (%d dials failed)\n", len(conns), addr, time.Since(t0).Round(time.Millisecond), failed)
	deadline := t0.Add(hold)
	closedAt := make([]time.Duration, len(conns))
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetReadDeadline(deadline)
			buf := make([]byte, 256)
			for {
				_, err := c.Read(buf)
				if err != nil {
					var ne net.Error
					if !(errors.As(err, &ne) && ne.Timeout()) {
						closedAt[i] = time.Since(t0)
					}
					return
				}
			}
		}()
	}
	// A real client: Info every 250 ms until one succeeds.
	tries := 0
	for time.Now().Before(deadline) {
		tries++
		cc, err := dial(addr)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		info, err := pb.NewParameterServerClient(cc).Info(ctx, &pb.InfoRequest{})
		cancel()
		cc.Close()
		if err == nil {
			fmt.Printf("conns: a real client's Info: ok at try %d, %v after the idle connections were opened (shard %d, clock %d)\n", tries, time.Since(t0).Round(time.Millisecond), info.Shard, info.Clock)
			break
		}
		if tries == 1 {
			fmt.Printf("conns: a real client's Info, first try at %v: %v\n", time.Since(t0).Round(time.Millisecond), err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	wg.Wait()
	k := 0
	var last time.Duration
	for _, d := range closedAt {
		if d > 0 {
			k++
			last = max(last, d)
		}
	}
	fmt.Printf("conns: the shard closed %d of the %d idle connections, the last %v after the first was opened\n", k, len(conns), last.Round(time.Millisecond))
	for _, c := range conns {
		c.Close()
	}
	return nil
}

// attackFlood (attack 2, sustained): n goroutines each hold one silent
// connection to addr and open the next as soon as the shard closes one,
// for hold; meanwhile a real client (a new connection each time) calls
// Info every 250 ms. It prints how many connections the flood opened and
// how many of the real calls succeeded. With http2, each connection first
// sends the HTTP/2 preface and an empty SETTINGS frame, which completes a
// gRPC server's handshake without a credential. With healthCall "check"
// or "watch", each connection is a gRPC client's that makes one health
// Check, or holds a health Watch open, and then never calls (the health
// service is served without the token).
func attackFlood(addr string, n int, hold time.Duration, http2 bool, healthCall string) error {
	if err := loopback(addr); err != nil {
		return err
	}
	if healthCall != "" && healthCall != "check" && healthCall != "watch" {
		return fmt.Errorf("-health %q: want check or watch", healthCall)
	}
	stopCtx, stopCalls := context.WithCancel(context.Background())
	defer stopCalls()
	stop := make(chan struct{})
	var opened, failed sync.Map // per flooder counts, summed below
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var o, f int
			defer func() { opened.Store(i, o); failed.Store(i, f) }()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if healthCall != "" {
					if holdHealth(stopCtx, addr, healthCall == "watch") {
						o++
					} else {
						f++
					}
					continue
				}
				c, err := net.DialTimeout("tcp", addr, 2*time.Second)
				if err != nil {
					f++
					continue
				}
				o++
				if http2 {
					c.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"))
				}
				closed := make(chan struct{})
				go func() { io.Copy(io.Discard, c); close(closed) }()
				select {
				case <-closed:
				case <-stop:
				}
				c.Close()
				<-closed
			}
		}()
	}
	ok, tries := 0, 0
	var firstErr error
	for time.Since(t0) < hold {
		time.Sleep(250 * time.Millisecond)
		tries++
		cc, err := dial(addr)
		if err != nil {
			close(stop)
			stopCalls()
			wg.Wait()
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err = pb.NewParameterServerClient(cc).Info(ctx, &pb.InfoRequest{})
		cancel()
		cc.Close()
		if err == nil {
			ok++
		} else if firstErr == nil {
			firstErr = err
		}
	}
	close(stop)
	stopCalls()
	wg.Wait()
	sum := func(m *sync.Map) (t int) {
		m.Range(func(_, v any) bool { t += v.(int); return true })
		return t
	}
	what := "silent connections"
	if healthCall != "" {
		what = "connections with a health " + healthCall + " that succeeded"
	}
	fmt.Printf("flood: %d flooders opened %d %s to %s in %v (%d dials or calls failed); a real client's Info: %d of %d ok\n",
		n, sum(&opened), what, addr, time.Since(t0).Round(time.Millisecond), sum(&failed), ok, tries)
	if firstErr != nil {
		fmt.Printf("flood: the first failed Info: %s\n", trimErr(firstErr))
	}
	return nil
}

// holdHealth opens a gRPC connection to addr, makes one health Check on
// it (or opens a health Watch and reads its first status) and holds it
// until the shard closes it or ctx ends: whether the call succeeded.
func holdHealth(ctx context.Context, addr string, watch bool) bool {
	cc, err := dial(addr)
	if err != nil {
		return false
	}
	defer cc.Close()
	h := healthpb.NewHealthClient(cc)
	if watch {
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		w, err := h.Watch(wctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return false
		}
		if _, err := w.Recv(); err != nil {
			return false
		}
		for {
			if _, err := w.Recv(); err != nil {
				return true
			}
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = h.Check(cctx, &healthpb.HealthCheckRequest{})
	cancel()
	if err != nil {
		return false
	}
	for st := cc.GetState(); st == connectivity.Ready; st = cc.GetState() {
		if !cc.WaitForStateChange(ctx, st) {
			break
		}
	}
	return true
}

// attackReform (item 3): forged Elastic.Reform requests, unsigned, to every
// address given (the probe tries each port a ring rank listens on; those
// that are not the Elastic service answer Unimplemented or fail).
func attackReform(addrs []string, n int) error {
	for _, a := range addrs {
		if a == "" {
			continue
		}
		cc, err := dial(a)
		if err != nil {
			return err
		}
		c := pb.NewElasticClient(cc)
		errs := map[string]int{}
		ok := 0
		for i := 0; i < n; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			_, err := c.Reform(ctx, &pb.ReformRequest{JobId: "shoal", Member: 1, Generation: 1, Reason: "probe: forged", Step: 1, Previous: []int32{0, 1}})
			cancel()
			if err != nil {
				errs[trim(err.Error())]++
			} else {
				ok++
			}
		}
		cc.Close()
		fmt.Printf("reform: %s: %d forged Reform requests: %d accepted\n", a, n, ok)
		for e, k := range errs {
			fmt.Printf("reform: %s:   %d x %s\n", a, k, e)
		}
	}
	return nil
}

func trim(s string) string {
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}

// attackSession (item 4): push as worker 0 at a far-ahead step without
// its session, with a made-up session, and pull as worker 0 without one.
func attackSession(addr string) error {
	cc, err := dial(addr)
	if err != nil {
		return err
	}
	defer cc.Close()
	c := pb.NewParameterServerClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := c.Info(ctx, &pb.InfoRequest{})
	if err != nil {
		return fmt.Errorf("the Info call: %w", err)
	}
	pv := info.GetPlan().GetVersion()
	fmt.Printf("session: shard %d, clock %d, mode %s, workers %d, live %v, ranges %v\n", info.Shard, info.Clock, info.Mode, info.Workers, info.LiveWorkers, info.Ranges)
	zeros := func() []byte {
		var k int64
		for _, r := range info.Ranges {
			k += r.Length
		}
		return make([]byte, 4*k)
	}()
	fake := make([]byte, 16)
	rand.Read(fake)
	for _, tc := range []struct {
		name    string
		session []byte
		step    int64
	}{
		{"push as worker 0 at step 1023, no session", nil, 1023},
		{"push as worker 0 at step 1023, a made-up session", fake, 1023},
		{"push as worker 0 at step 5, no session", nil, 5},
	} {
		h := &pb.PushHeader{WorkerId: 0, Step: tc.step, Clock: info.Clock, PlanVersion: pv, Ranges: info.Ranges, Session: tc.session}
		resp, err := push(ctx, c, h, zeros)
		fmt.Printf("session: %s: resp=%v err=%v\n", tc.name, resp, err)
	}
	for _, s := range [][]byte{nil, fake} {
		st, err := c.Pull(ctx, &pb.PullRequest{Ranges: info.Ranges, WorkerId: 0, PlanVersion: pv, Session: s})
		if err == nil {
			var got int
			for {
				p, e := st.Recv()
				if e != nil {
					if e != io.EOF {
						err = e
					}
					break
				}
				got += len(p.Values)
			}
			fmt.Printf("session: pull as worker 0, session %x: %d bytes, err=%v\n", s, got, err)
			continue
		}
		fmt.Printf("session: pull as worker 0, session %x: err=%v\n", s, err)
	}
	return nil
}

// attackHijack (item 4, the case README's "Not protected" names): a client
// that holds the token joins as worker 0 while the real worker 0 trains,
// then pushes at a far-ahead step with the session it was given.
func attackHijack(addr string) error {
	cc, err := dial(addr)
	if err != nil {
		return err
	}
	defer cc.Close()
	c := pb.NewParameterServerClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := c.Info(ctx, &pb.InfoRequest{})
	if err != nil {
		return fmt.Errorf("the Info call: %w", err)
	}
	pv := info.GetPlan().GetVersion()
	j, err := c.JoinWorker(ctx, &pb.JoinWorkerRequest{WorkerId: 0, PlanVersion: pv, NotBefore: 1023, PushEvery: 1})
	fmt.Printf("hijack: JoinWorker as worker 0 asking not_before 1023: resp=%v err=%v\n", j, err)
	if err != nil {
		return nil
	}
	var k int64
	for _, r := range info.Ranges {
		k += r.Length
	}
	for _, step := range []int64{j.Step, j.Step + 1, j.Step + 1023, j.Step + 1025} {
		h := &pb.PushHeader{WorkerId: 0, Step: step, Clock: info.Clock, PlanVersion: pv, Ranges: info.Ranges, Session: j.Session}
		resp, err := push(ctx, c, h, make([]byte, 4*k))
		fmt.Printf("hijack: push as worker 0 at step %d with the new session: resp=%v err=%v\n", step, resp, err)
	}
	// What a restarted worker 0 (not_before 0) is then told to begin at.
	r, err := c.JoinWorker(ctx, &pb.JoinWorkerRequest{WorkerId: 0, PlanVersion: pv, NotBefore: 0, PushEvery: 1})
	if err != nil {
		fmt.Printf("hijack: a later join as worker 0 with not_before 0 (as a restarted worker 0 would): err=%v\n", err)
	} else {
		fmt.Printf("hijack: a later join as worker 0 with not_before 0 (as a restarted worker 0 would): begins at step %d\n", r.Step)
	}
	return nil
}

func push(ctx context.Context, c pb.ParameterServerClient, h *pb.PushHeader, grads []byte) (*pb.PushResponse, error) {
	st, err := c.Push(ctx)
	if err != nil {
		return nil, err
	}
	const piece = 1 << 20
	first := true
	for len(grads) > 0 || first {
		k := min(len(grads), piece)
		m := &pb.PushPiece{Grads: grads[:k]}
		if first {
			m.Header = h
			first = false
		}
		if err := st.Send(m); err != nil {
			break // the error comes with CloseAndRecv
		}
		grads = grads[k:]
	}
	return st.CloseAndRecv()
}

// attackMalformed (item 5): malformed pushes (no worker 0 session needed:
// these are refused before or regardless of it), then junk gossip packets.
func attackMalformed(addr, gossip string, packets int, joinAs int64) error {
	cc, err := dial(addr)
	if err != nil {
		return err
	}
	defer cc.Close()
	c := pb.NewParameterServerClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := c.Info(ctx, &pb.InfoRequest{})
	if err != nil {
		return fmt.Errorf("the Info call: %w", err)
	}
	pv := info.GetPlan().GetVersion()
	var session []byte
	wid, base := int64(0), int64(1)
	if joinAs >= 0 {
		jr, err := c.JoinWorker(ctx, &pb.JoinWorkerRequest{WorkerId: joinAs, PlanVersion: pv, PushEvery: 1})
		fmt.Printf("malformed: JoinWorker as worker %d: err=%v\n", joinAs, err)
		if err != nil {
			return nil
		}
		session, wid, base = jr.Session, joinAs, jr.Step+1
	}
	var floats int64
	for _, r := range info.Ranges {
		floats += r.Length
	}
	all := info.Ranges
	nan := make([]byte, 4*floats)
	binary.LittleEndian.PutUint32(nan, math.Float32bits(float32(math.NaN())))
	cases := []struct {
		name  string
		h     *pb.PushHeader
		grads []byte
	}{
		{"short gradient (half the floats)", &pb.PushHeader{WorkerId: 0, Step: 1, Ranges: all, PlanVersion: pv}, make([]byte, 2*floats)},
		{"long gradient (one float too many)", &pb.PushHeader{WorkerId: 0, Step: 1, Ranges: all, PlanVersion: pv}, make([]byte, 4*floats+4)},
		{"ragged gradient (not a whole float)", &pb.PushHeader{WorkerId: 0, Step: 1, Ranges: all, PlanVersion: pv}, make([]byte, 4*floats-1)},
		{"range past the vector", &pb.PushHeader{WorkerId: 0, Step: 1, Ranges: []*pb.Range{{Offset: floats, Length: 10}}, PlanVersion: pv}, make([]byte, 40)},
		{"negative range", &pb.PushHeader{WorkerId: 0, Step: 1, Ranges: []*pb.Range{{Offset: -5, Length: 10}}, PlanVersion: pv}, make([]byte, 40)},
		{"overlapping ranges", &pb.PushHeader{WorkerId: 0, Step: 1, Ranges: []*pb.Range{{Offset: 0, Length: 10}, {Offset: 5, Length: 10}}, PlanVersion: pv}, make([]byte, 80)},
		{"unknown encoding 7", &pb.PushHeader{WorkerId: 0, Step: 1, Ranges: all, PlanVersion: pv, Encoding: 7}, make([]byte, 4*floats)},
		{"lanes 99", &pb.PushHeader{WorkerId: 0, Step: 1, Ranges: all, PlanVersion: pv, Lanes: 99, Lane: 3}, make([]byte, 4*floats)},
		{"wrong plan version", &pb.PushHeader{WorkerId: 0, Step: 1, Ranges: all, PlanVersion: 77}, make([]byte, 4*floats)},
		{"worker id 9999 (outside --workers)", &pb.PushHeader{WorkerId: 9999, Step: 1, Ranges: all, PlanVersion: pv}, make([]byte, 4*floats)},
		{"negative step", &pb.PushHeader{WorkerId: 0, Step: -3, Ranges: all, PlanVersion: pv}, make([]byte, 4*floats)},
		{"NaN gradient", &pb.PushHeader{WorkerId: 0, Step: 1, Ranges: all, PlanVersion: pv}, nan},
		{"no header", nil, make([]byte, 16)},
	}
	for _, tc := range cases {
		if tc.h != nil {
			tc.h.Session = session
			if tc.h.WorkerId == 0 {
				tc.h.WorkerId = wid
			}
			if tc.h.Step == 1 {
				tc.h.Step = base // the step the join allows
			}
		}
	}
	codes := map[string]int{}
	for _, tc := range cases {
		_, err := push(ctx, c, tc.h, tc.grads)
		fmt.Printf("malformed: %s: %v\n", tc.name, trimErr(err))
		codes[codeOf(err)]++
	}
	fmt.Printf("malformed: %d pushes sent; answers by code: %v\n", len(cases), codes)

	if gossip == "" {
		return nil
	}
	if err := loopback(gossip); err != nil {
		return err
	}
	u, err := net.Dial("udp", gossip)
	if err != nil {
		return err
	}
	buf := make([]byte, 200)
	for i := 0; i < packets; i++ {
		rand.Read(buf)
		u.Write(buf[:20+i%180])
		if i%100 == 99 {
			time.Sleep(5 * time.Millisecond)
		}
	}
	u.Close()
	tcpOK := 0
	for i := 0; i < 20; i++ {
		t, err := net.DialTimeout("tcp", gossip, 2*time.Second)
		if err != nil {
			continue
		}
		rand.Read(buf)
		t.Write(buf)
		t.Close()
		tcpOK++
	}
	fmt.Printf("malformed: sent %d junk UDP packets and %d junk TCP streams to gossip %s\n", packets, tcpOK, gossip)
	return nil
}

func codeOf(err error) string {
	if err == nil {
		return "OK"
	}
	s := err.Error()
	if i := strings.Index(s, "code = "); i >= 0 {
		s = s[i+7:]
		if j := strings.IndexByte(s, ' '); j >= 0 {
			s = s[:j]
		}
		return s
	}
	return "other"
}

func trimErr(err error) string {
	if err == nil {
		return "accepted (no error)"
	}
	return trim(err.Error())
}

// printMetrics prints the refusal counters of a /metrics page.
func printMetrics(url string) error {
	if !strings.HasPrefix(url, "http://127.0.0.1:") {
		return fmt.Errorf("metrics URL %q is not on loopback", url)
	}
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "#") || strings.HasSuffix(l, " 0") {
			continue
		}
		if strings.HasPrefix(l, "shoal_ps_rejected") || (strings.HasPrefix(l, "grpc_server_handled_total") && !strings.Contains(l, `code="OK"`)) {
			fmt.Println("metrics:", l)
		}
	}
	return nil
}
