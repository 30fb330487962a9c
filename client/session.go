package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/shoalml/shoal/proto/shoalpb"
	"github.com/shoalml/shoal/shard"
)

// Sessions. A shard binds a worker id to whoever joined as it
// (JoinWorker): the join returns a session, and only a push or pull that
// carries it may speak for that id. The Client keeps, per worker id it
// joined, each shard's session and sends it with the id's pushes and
// pulls. Where a shard holds no session for the id (it restarted since,
// or the id never joined it), the shard says so (reason NO_SESSION) and
// the Client binds the id on that shard alone, which a shard does only
// where it holds no session and which admits nothing, and repeats the
// call once: a restarted shard is taken up where it left off. Where
// the shard holds another session (another client joined as the id since
// this one did, or this one never joined it), the call fails with
// PermissionDenied: this Client no longer speaks for the worker.

// JoinOption configures a JoinWorker.
type JoinOption func(*joinOptions)

type joinOptions struct{ pushEvery int64 }

// JoinPushEvery says the worker pushes every k steps (Downpour's n_push;
// default 1). The shards name no step past what the pushes they took for
// the worker id could have reached at that rate, so another client's
// pushes cannot make it skip its own steps (ps.Server.Join).
func JoinPushEvery(k int) JoinOption { return func(o *joinOptions) { o.pushEvery = int64(k) } }

// workerSession is what the Client holds for one worker id it joined.
type workerSession struct {
	pushEvery int64
	sessions  [][]byte // per shard; nil where not joined
}

// session is shard s's session for worker (nil: none held).
func (c *Client) session(worker int64, s int) []byte {
	c.smu.Lock()
	defer c.smu.Unlock()
	if ws, ok := c.sessions[worker]; ok {
		return ws.sessions[s]
	}
	return nil
}

// setSession keeps shard s's session for worker, joined pushing every
// pushEvery steps.
func (c *Client) setSession(worker int64, s int, pushEvery int64, sess []byte) {
	c.smu.Lock()
	defer c.smu.Unlock()
	ws, ok := c.sessions[worker]
	if !ok {
		ws = &workerSession{sessions: make([][]byte, len(c.stubs))}
		c.sessions[worker] = ws
	}
	ws.pushEvery, ws.sessions[s] = pushEvery, slices.Clone(sess)
}

// pushEveryOf is the rate worker joined with (0: not joined, which the
// shards take as 1).
func (c *Client) pushEveryOf(worker int64) int64 {
	c.smu.Lock()
	defer c.smu.Unlock()
	if ws, ok := c.sessions[worker]; ok {
		return ws.pushEvery
	}
	return 0
}

// joinShard joins worker to shard s alone, not before notBefore, keeps
// the session, and returns the step the shard names. With rebind it
// only binds worker where the shard holds no session for it
// (JoinWorkerRequest.rebind).
func (c *Client) joinShard(ctx context.Context, worker int64, s int, notBefore, pushEvery int64, rebind bool) (int64, error) {
	var step int64
	what := "join"
	if rebind {
		what = "bind"
	}
	err := c.retry(ctx, fmt.Sprintf("client: %s worker %d at server %s", what, worker, c.addrs[s]), func(ctx context.Context) error {
		resp, err := c.stubs[s].JoinWorker(ctx, &pb.JoinWorkerRequest{WorkerId: worker, PlanVersion: shard.Version, NotBefore: notBefore, PushEvery: pushEvery, Rebind: rebind})
		if err != nil {
			return err
		}
		if len(resp.Session) == 0 {
			return status.Errorf(codes.Internal, "the join returned no session")
		}
		step = resp.Step
		c.setSession(worker, s, pushEvery, resp.Session)
		return nil
	})
	return step, err
}

// asWorker runs call, one call to shard s on behalf of worker (a push, a
// push-pull or a pull) with the session the Client holds, and, where the
// shard holds no session for worker, binds worker there again (a rebind:
// it admits nothing, the worker goes on where it is) and runs it once
// more with the new session. Where another call of this Client bound the
// shard meanwhile (its calls run concurrently), the call is run again
// with that session rather than binding once more. A reader that is no
// worker (worker < 0) carries none.
func (c *Client) asWorker(ctx context.Context, worker int64, s int, call func(session []byte) error) error {
	if worker < 0 {
		return call(nil)
	}
	sent := c.session(worker, s)
	err := call(sent)
	if !(noSession(err) || NotYours(err)) || ctx.Err() != nil {
		return err
	}
	c.bmu.Lock()
	held := c.session(worker, s)
	if bytes.Equal(held, sent) && noSession(err) {
		_, jerr := c.joinShard(ctx, worker, s, 0, c.pushEveryOf(worker), true)
		held = c.session(worker, s)
		if jerr != nil {
			c.bmu.Unlock()
			return fmt.Errorf("%w; binding it again: %w", err, jerr)
		}
	}
	c.bmu.Unlock()
	if bytes.Equal(held, sent) {
		return err // not ours, and no join of this Client since
	}
	return call(held)
}

// noSession reports whether err says that a shard holds no session for
// the worker of the call (ReasonNoSession): it restarted, or the worker
// never joined it.
func noSession(err error) bool { return hasReason(err, pb.ReasonNoSession) }

// hasReason reports whether err, or an error it wraps or joins, carries
// Shoal's ErrorInfo reason.
func hasReason(err error, reason string) bool {
	if err == nil {
		return false
	}
	if s, ok := err.(interface{ GRPCStatus() *status.Status }); ok {
		for _, d := range s.GRPCStatus().Details() {
			if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == pb.ErrorDomain && info.Reason == reason {
				return true
			}
		}
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return hasReason(u.Unwrap(), reason)
	case interface{ Unwrap() []error }:
		return slices.ContainsFunc(u.Unwrap(), func(e error) bool { return hasReason(e, reason) })
	}
	return false
}

// NotYours reports whether err says that a shard binds the worker id of
// the call to another client: another client joined as it since this one
// did (or this one never joined it). This Client no longer speaks for the
// worker; joining again would take the id back from the other.
func NotYours(err error) bool {
	var s interface{ GRPCStatus() *status.Status }
	return errors.As(err, &s) && s.GRPCStatus().Code() == codes.PermissionDenied
}
