// Package collectivetest holds the conformance suite that every
// collective.Transport must pass, run over Shoal's Communicator:
// Conformance checks every collective's results against a float64
// reference within stated tolerances, for every compression; the failure
// cases check that a dead or silent peer ends every live rank's call with
// an error naming it, never a hang. A transport's own test calls them
// with a NewGroupFunc that makes a group of its transports (the in-memory
// one in collective, TCP and shared memory in collnet).
//
// Concurrency: the suite runs one goroutine per rank and waits for all of
// them; the group it makes is closed when the test ends.
package collectivetest
