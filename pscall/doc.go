// Package pscall holds the arguments and results of the calls a worker
// makes to the parameter servers (pull, push, push-pull), defined once for
// the client library (package client, which makes the calls over gRPC)
// and the training loop (package worker, whose strategies make them
// through worker.ParameterServers). Both import it and neither imports the
// other: it is a leaf, with no dependency but the standard library.
//
// Ownership: the slices in the arguments are the caller's; a call reads
// them (Dst: writes it) only until it returns.
//
// Example (example_test.go) fills in a push-pull.
package pscall
