// Package consistency names how Shoal's workers agree on the weights, and
// measures how far apart they drifted. A Mode is one of the four ways:
// through parameter servers, Async (Downpour SGD), Sync, or SSP (bounded
// staleness), or by allreduce among the workers, Ring. Its String is the
// name that flags, the --json output and the benchmark results carry, and
// it marshals as that name. Staleness is the histogram of pushes by how
// many updates old their gradients were, the quantity SSP bounds; servers
// and workers count it and the launcher and the benchmark report read it.
//
// It is a leaf: ps, worker, client, launch, cmd/shoal and bench import it,
// and it imports nothing of Shoal's. Nothing here blocks or starts a
// goroutine; a Staleness is not safe for concurrent use.
//
// Example (example_test.go) parses a mode, asks what it does, and counts
// and marshals a staleness histogram.
package consistency
