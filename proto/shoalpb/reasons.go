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
)
