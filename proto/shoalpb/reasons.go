package shoalpb

// ErrorDomain and the Reason constants name the google.rpc.ErrorInfo
// details Shoal's services attach to an error status where a client must
// act on the kind of failure, not only on its code.
const (
	ErrorDomain = "shoal.dev"
	// ReasonNotMember (with FailedPrecondition): a sync or SSP shard took
	// the worker out of its live set (membership declared it dead, for
	// example while it was cut off from the network). The worker joins
	// again (JoinWorker) and goes on from the step the shards name.
	ReasonNotMember = "NOT_IN_LIVE_SET"
	// ReasonNoSession (with FailedPrecondition): the shard holds no
	// session for the worker id of a push or pull: the id never joined
	// this shard, or the shard restarted since it did. The worker joins
	// the shard again (JoinWorker) and repeats the call with the new
	// session. A session that is not the shard's (another client joined
	// as the worker since) is PermissionDenied, with no such remedy.
	ReasonNoSession = "NO_SESSION"
)
