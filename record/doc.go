// Package record holds the measurements of a training run that more than
// one report carries: where a step's time went (StepTime, Quantiles) and
// the test accuracy over the run (CurvePoint). `shoal train --json`
// (launch.Result) and the benchmark harness's results.json (bench.Record)
// both use these types, so neither copies the other's and the launcher
// does not import the harness (nor its plots).
//
// launch.Result and bench.Record stay two types: a Result is what one
// launcher saw (its own clock: train_seconds from the first worker's start
// to the last one's exit, wall_seconds, failed workers, membership), a
// Record what the harness compares across runs (the run's ID and command,
// the NIC model, samples/s over the workers' own time, the analytic
// communication model); bench.Record.Fill derives the one from the other.
//
// The package is a leaf: plain data and pure functions, no goroutines.
package record
