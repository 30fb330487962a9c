// Package testcluster runs Shoal's servers in-process over bufconn for
// tests, with fault injection: a shard can be made to fail the next calls
// with a code, to fail after doing the work (a lost reply), or to stall
// until the caller's deadline.
//
//	c := testcluster.Start(t, cores...)
//	cl, err := client.Dial(ctx, c.Addrs(), client.WithDialOptions(c.DialOption()))
//	c.Shard(0).FailNext(codes.Unavailable, 2)
package testcluster
