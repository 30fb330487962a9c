package collnet

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/shoalml/shoal/collective"
	pb "github.com/shoalml/shoal/proto/shoalpb"
)

// helloTimeout bounds how long an accepted connection may take to say
// hello, so that a stray client cannot hold up the setup.
const helloTimeout = 10 * time.Second

// Connect joins this rank's group: it rendezvouses with the other ranks
// through rank 0 (which serves the rendezvous for the duration of the
// call), connects to every other rank over TCP, and, with SharedMemory,
// sets up shared-memory rings to the ranks on the same host. It returns
// when every link is up, or fails when ctx ends first; every rank should
// be given about the same deadline. Errors: ErrConfig for a bad cfg; a
// gRPC status error (status.Code: InvalidArgument, DeadlineExceeded, …)
// from the rendezvous; a *collective.PeerError naming a rank that could
// not be connected to.
func Connect(ctx context.Context, cfg Config) (collective.Transport, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		if cfg.MasterListener != nil {
			cfg.MasterListener.Close()
		}
		return nil, err
	}
	log := cfg.Logger.With("component", "collnet", "rank", cfg.Rank, "size", cfg.Size)
	t := &transport{rank: cfg.Rank, size: cfg.Size, log: log, links: make([]*link, cfg.Size), hosts: []string{cfg.HostID}}
	if cfg.Size == 1 {
		if cfg.MasterListener != nil {
			cfg.MasterListener.Close()
		}
		return t, nil
	}

	var stopRendezvous func()
	var rv *rendezvous
	if cfg.Rank == 0 {
		mlis := cfg.MasterListener
		if mlis == nil {
			if mlis, err = ListenMaster(cfg.Master); err != nil {
				return nil, err
			}
		}
		rv = newRendezvous(cfg.JobID, cfg.Size, log)
		stopRendezvous = serveRendezvous(rv, mlis, cfg.Security)
		// It keeps serving Report for the whole job, until this rank's
		// transport closes; stopped here only if Connect fails.
		defer func() {
			if t.rv == nil {
				stopRendezvous()
			}
		}()
	}

	lis, err := listenData(cfg.Listen)
	if err != nil {
		if rv != nil {
			rv.fail(err)
		}
		return nil, err
	}
	defer lis.Close()
	advertise := cfg.Advertise
	if advertise == "" {
		advertise = lis.Addr().String()
	}
	req := &pb.JoinRequest{
		JobId:       cfg.JobID,
		Rank:        int32(cfg.Rank),
		WorldSize:   int32(cfg.Size),
		DataAddress: advertise,
		HostId:      cfg.HostID,
	}
	var resp *pb.JoinResponse
	if rv != nil {
		resp, err = rv.Join(ctx, req)
		if err != nil {
			rv.fail(err)
		}
	} else {
		resp, err = joinRemote(ctx, cfg.Master, req, cfg.Security)
	}
	if err == nil {
		err = checkResponse(resp, cfg.Size)
	}
	if err != nil {
		master := cfg.Master
		if cfg.MasterListener != nil {
			master = cfg.MasterListener.Addr().String()
		}
		return nil, fmt.Errorf("collnet: rank %d of %d: rendezvous at %s: %w", cfg.Rank, cfg.Size, master, err)
	}
	log.Debug("rendezvous complete", "data_address", advertise)
	t.hosts = make([]string, cfg.Size)
	for i, ri := range resp.Ranks {
		t.hosts[i] = ri.HostId
	}

	conns, err := mesh(ctx, cfg, lis, resp)
	for peer, c := range conns {
		if c.tcp != nil {
			t.links[peer] = newLink(peer, c.tcp, c.greet, c.data)
		}
	}
	if err != nil {
		t.Close()
		return nil, fmt.Errorf("collnet: rank %d of %d: connecting: %w", cfg.Rank, cfg.Size, err)
	}
	nshm := 0
	if err := t.setupShm(ctx, cfg, resp); err != nil {
		t.Close()
		return nil, fmt.Errorf("collnet: rank %d of %d: shared memory setup: %w", cfg.Rank, cfg.Size, err)
	}
	for _, l := range t.links {
		if l != nil && l.send != nil {
			nshm++
			t.wg.Go(func() { t.watch(l) })
		}
	}
	log.Info("connected", "data_address", advertise, "shm_peers", nshm, "tcp_peers", cfg.Size-1-nshm)
	t.master, t.jobID, t.sec = cfg.Master, cfg.JobID, cfg.Security
	if rv != nil {
		t.rv, t.stopRendezvous = rv, stopRendezvous
	}
	return t, nil
}

// listenData opens the data-plane listener.
func listenData(addr string) (*net.TCPListener, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("collnet: data-plane listen on %s: %w", addr, err)
	}
	return lis.(*net.TCPListener), nil
}

// peerConn is a data-plane connection: the TCP connection, what the
// handshake went over (secureData), and what Send and Recv use (dataConn).
type peerConn struct {
	tcp         *net.TCPConn
	greet, data net.Conn
}

// mesh connects this rank to every other: it dials the higher ranks and
// accepts the lower ones. conns[peer] is set for each connection made,
// even when it fails.
func mesh(ctx context.Context, cfg Config, lis *net.TCPListener, resp *pb.JoinResponse) ([]peerConn, error) {
	conns := make([]peerConn, cfg.Size)
	var wg sync.WaitGroup
	var acceptErr error
	stopOnCancel := context.AfterFunc(ctx, func() { lis.Close() })
	defer stopOnCancel()
	wg.Go(func() { acceptErr = accept(ctx, cfg, lis, conns[:cfg.Rank]) })
	var dialErr error
	for peer := cfg.Rank + 1; peer < cfg.Size && dialErr == nil; peer++ {
		conns[peer], dialErr = dial(ctx, cfg, peer, resp.Ranks[peer].DataAddress)
	}
	if dialErr != nil {
		lis.Close() // stops accept
	}
	wg.Wait()
	for _, c := range conns {
		if c.tcp != nil {
			tune(c.tcp, cfg.SocketBufferBytes)
		}
	}
	if dialErr != nil {
		return conns, dialErr
	}
	return conns, acceptErr
}

// secureData runs the data-plane connection c over mutual TLS when cfg
// says so, as the client of a peer at addr or as the server: under TLS,
// the hello and everything after it are encrypted and come from a peer
// with a certificate of the job's CA, so a stranger cannot take a rank's
// place or name a shared-memory ring. It returns the connection to say
// hello over: c, or TLS over Config.WrapData's wrapper of c (closed if the
// handshake fails). The caller bounds the handshake with c's deadline.
func secureData(ctx context.Context, cfg Config, c *net.TCPConn, addr string) (net.Conn, error) {
	if !cfg.Security.TLS() {
		return c, nil
	}
	var wrapped net.Conn = c
	if cfg.WrapData != nil {
		wrapped = cfg.WrapData(c)
	}
	var tc *tls.Conn
	if addr != "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			wrapped.Close()
			return nil, err
		}
		tc = tls.Client(wrapped, cfg.Security.ClientTLS(host))
	} else {
		server := cfg.Security.ServerTLS()
		// No session tickets: nothing is ever resumed, and none is sent.
		server.SessionTicketsDisabled = true
		tc = tls.Server(wrapped, server)
	}
	if err := tc.HandshakeContext(ctx); err != nil {
		tc.Close()
		return nil, fmt.Errorf("TLS handshake: %w", err)
	}
	return tc, nil
}

// dataConn is what Send and Recv use on c once its hello (over greet)
// went through: greet under TLS; without, Config.WrapData's wrapper of c,
// made only now, so that the wrapper sees no hello and no stray gets one.
func dataConn(cfg Config, c *net.TCPConn, greet net.Conn) net.Conn {
	if cfg.Security.TLS() || cfg.WrapData == nil {
		return greet
	}
	return cfg.WrapData(c)
}

// accept takes connections on lis until every lower rank (len(conns)) has
// dialed in with a valid hello. Each connection says hello (after its TLS
// handshake, when on) in a goroutine of its own, within helloTimeout, so
// that a silent or stray client holds up no one; one with a bad hello is
// refused and closed, and accept goes on waiting.
func accept(ctx context.Context, cfg Config, lis *net.TCPListener, conns []peerConn) error {
	if len(conns) == 0 {
		return nil
	}
	log := cfg.Logger.With("component", "collnet", "rank", cfg.Rank)
	var (
		mu   sync.Mutex
		have int
		open = map[*net.TCPConn]bool{} // connections still saying hello
		wg   sync.WaitGroup
	)
	allIn := make(chan struct{})
	defer func() {
		// Connections still saying hello are strays now: end them.
		mu.Lock()
		for c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}()
	greet := func(c *net.TCPConn) {
		deadline := time.Now().Add(helloTimeout)
		if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
			deadline = d
		}
		c.SetDeadline(deadline)
		hc, err := secureData(ctx, cfg, c, "")
		var h hello
		if err == nil {
			h, err = readHello(hc)
		}
		if err == nil {
			err = h.check(cfg.Rank, cfg.Size, cfg.JobID)
		}
		mu.Lock()
		delete(open, c)
		if err == nil && conns[h.From].tcp != nil {
			err = fmt.Errorf("%w: rank %d connected twice", errHandshake, h.From)
		}
		if err == nil {
			conns[h.From] = peerConn{tcp: c, greet: hc, data: dataConn(cfg, c, hc)}
			if have++; have == len(conns) {
				close(allIn)
			}
		}
		mu.Unlock()
		if err != nil {
			log.Warn("refused a data-plane connection", "remote", c.RemoteAddr().String(), "err", err)
			if hc != nil {
				hc.Write(appendVerdict(nil, err.Error()))
				hc.Close() // under TLS, the wrapper too
			}
			c.Close()
			return
		}
		if _, err := hc.Write(appendVerdict(nil, "")); err != nil {
			// The rank's dial fails with it, and so does the setup.
			log.Warn("answering a hello", "peer", h.From, "err", err)
		}
		c.SetDeadline(time.Time{})
	}
	accepted := make(chan error, 1)
	go func() {
		for {
			c, err := lis.AcceptTCP()
			if err != nil {
				accepted <- err
				return
			}
			mu.Lock()
			open[c] = true
			mu.Unlock()
			wg.Go(func() { greet(c) })
		}
	}()
	var err error
	select {
	case <-allIn:
		lis.Close() // every lower rank is in: no more hellos
		<-accepted
		return nil
	case err = <-accepted:
	}
	mu.Lock()
	defer mu.Unlock()
	var missing []int
	for i, c := range conns {
		if c.tcp == nil {
			missing = append(missing, i)
		}
	}
	if len(missing) == 0 {
		return nil // the last hello and the listener's end crossed
	}
	if ctx.Err() != nil {
		err = ctx.Err()
	}
	return &collective.PeerError{Rank: missing[0], Err: fmt.Errorf("ranks %v never connected: %w", missing, err)}
}

// dial connects to peer at addr (over TLS, when on) and says hello.
func dial(ctx context.Context, cfg Config, peer int, addr string) (peerConn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return peerConn{}, &collective.PeerError{Rank: peer, Err: fmt.Errorf("dialing %s: %w", addr, err)}
	}
	tc := c.(*net.TCPConn)
	release := bindDeadline(ctx, tc.SetDeadline)
	hc, err := secureData(ctx, cfg, tc, addr)
	if err == nil {
		_, err = hc.Write(appendHello(nil, hello{From: cfg.Rank, To: peer, Size: cfg.Size, JobID: cfg.JobID}))
	}
	if err == nil {
		err = readVerdict(hc)
	}
	release()
	if err != nil {
		if hc != nil {
			hc.Close() // under TLS, the wrapper too
		}
		tc.Close()
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", ctx.Err(), err)
		}
		return peerConn{}, &collective.PeerError{Rank: peer, Err: fmt.Errorf("handshake with %s: %w", addr, err)}
	}
	tc.SetDeadline(time.Time{})
	return peerConn{tcp: tc, greet: hc, data: dataConn(cfg, tc, hc)}, nil
}

// tune sets a data-plane connection's options: no Nagle delay (each Send
// is written at once), and the socket buffer sizes asked for.
func tune(c *net.TCPConn, bufBytes int) {
	c.SetNoDelay(true)
	if bufBytes > 0 {
		c.SetReadBuffer(bufBytes)
		c.SetWriteBuffer(bufBytes)
	}
}

// setupShm sets up rings with every peer on this host, where both sides
// can, in four steps (each side: offer its ring to every such peer; read
// their offers and map their rings; tell each whether that worked; read
// whether they could), so that no step waits for a peer that waits in
// turn. The connections carry a few bytes each way, well within socket
// buffers, so writes never block.
func (t *transport) setupShm(ctx context.Context, cfg Config, resp *pb.JoinResponse) error {
	me := resp.Ranks[cfg.Rank].HostId
	type pair struct {
		l        *link
		own      *ring
		offer    shmOffer
		peerRing *ring
		ok       bool
	}
	var pairs []*pair
	for peer, l := range t.links {
		if l != nil && resp.Ranks[peer].HostId == me {
			pairs = append(pairs, &pair{l: l})
		}
	}
	if len(pairs) == 0 {
		return nil
	}
	var releases []func()
	defer func() {
		for _, r := range releases {
			r()
		}
		for _, p := range pairs {
			// Connect's deadline must not end the links (nor, in shm
			// mode, make the watcher take the peer for dead).
			p.l.conn.SetDeadline(time.Time{})
		}
		for _, p := range pairs {
			if p.offer.Path != "" {
				os.Remove(p.offer.Path) // the peer unlinked it already, unless it failed
			}
			if !p.ok {
				p.own.unmap()
				p.peerRing.unmap()
			}
		}
	}()
	for _, p := range pairs {
		releases = append(releases, bindDeadline(ctx, p.l.conn.SetDeadline))
	}
	for _, p := range pairs {
		if cfg.SharedMemory && shmSupported {
			var err error
			p.own, p.offer, err = createRing(cfg.ShmDir, cfg.RingBytes)
			if err != nil {
				t.log.Warn("no shared memory with a peer on this host; using TCP", "peer", p.l.peer, "err", err)
				p.own, p.offer = nil, shmOffer{}
			}
		}
		if _, err := p.l.ctl.Write(appendOffer(nil, p.offer)); err != nil {
			return t.setupError(ctx, p.l.peer, err)
		}
	}
	for _, p := range pairs {
		o, err := readOffer(p.l.ctl)
		if err != nil {
			return t.setupError(ctx, p.l.peer, err)
		}
		if o.Path != "" && p.own != nil {
			if p.peerRing, err = openRing(o); err != nil {
				t.log.Warn("cannot map a peer's ring; using TCP", "peer", p.l.peer, "err", err)
			}
		}
		mapped := byte(0)
		if p.peerRing != nil {
			mapped = 1
		}
		if _, err := p.l.ctl.Write([]byte{mapped}); err != nil {
			return t.setupError(ctx, p.l.peer, err)
		}
	}
	var b [1]byte
	for _, p := range pairs {
		if _, err := io.ReadFull(p.l.ctl, b[:]); err != nil {
			return t.setupError(ctx, p.l.peer, err)
		}
		if b[0] > 1 {
			return t.setupError(ctx, p.l.peer, fmt.Errorf("%w: shared-memory result %d", errHandshake, b[0]))
		}
		p.ok = b[0] == 1 && p.peerRing != nil
	}
	for _, p := range pairs {
		if p.ok {
			p.l.send, p.l.recv = p.own, p.peerRing
		}
	}
	return nil
}

func (t *transport) setupError(ctx context.Context, peer int, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		err = fmt.Errorf("%w (%w)", cerr, err)
	}
	return &collective.PeerError{Rank: peer, Err: err}
}
