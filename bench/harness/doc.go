// Package harness runs Shoal's benchmarks: the logic behind the `shoal
// bench` subcommands, which only turn their flags into the Configs here,
// call one entry point and print. It times one worker's training step
// (Compute), predicts jobs by simulation (Plan, Simulate), emulates their
// accuracy (Emulate), runs the training matrix as children of this binary
// (Train) and writes results.json, report.md and the plots (WriteOutputs).
//
// It sits just under cmd/shoal: it drives launch (the children of a run),
// sim, emulate and bench, and nothing below it imports it.
//
// Concurrency: an entry point runs on its caller's goroutine and starts
// none that outlive it; the Configs are values, read and not kept.
// Output goes to the io.Writer given, in the order of the work.
package harness
