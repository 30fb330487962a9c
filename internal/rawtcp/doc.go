// Package rawtcp measures the floor under any transport that moves a
// vector to a peer and one back: the round trip of N bytes each way over
// one TCP connection on loopback, with nothing on top (no framing, no
// serialisation, no RPC framework). `shoal bench tcp` prints it, and
// `make bench-ps` sets it beside a parameter server's per-step pull+push
// of the same bytes.
//
// One round trip: the client writes N bytes; the server reads all N and
// writes them back; the client reads all N. Measure times Iters of them
// after Warmup untimed ones, then makes one more, with a fresh pattern,
// and checks that every byte came back.
//
// Concurrency: Measure starts the server goroutine and a watcher of ctx,
// and stops and waits for both before it returns. Each call has its own
// listener, connection and buffers; calls may run concurrently (they then
// share the machine's cores, which shows in the times).
//
// Example (example_test.go) measures a 512,512 MLP's vector each way.
package rawtcp
