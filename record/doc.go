// Package record holds what more than one report of a training run
// carries: the run itself (Run: what was trained, how far, when the
// workers began, the test accuracy during and after), where a step's time
// went (StepTime, Quantiles) and the points of the accuracy curve
// (CurvePoint). `shoal train --json` (launch.Result) and the benchmark
// harness's results.json (bench.Record) both embed Run and use the other
// types, so neither copies the other's fields and the launcher does not
// import the harness (nor its plots): bench.Record.Fill takes a record's
// Run from shoal train's summary in one assignment.
//
// Run holds exactly the fields that both reports write under the same
// JSON key, with the same omitempty and the same meaning: parameters,
// batch, optimizer, lr, lanes, parallel_step, steps, samples,
// start_offsets, curve and test_accuracy. The rest stays in each type
// because it differs in one of those three:
//
//   - train_seconds and samples_per_sec: a Result's are the launcher's
//     clock (first worker's start to the last one's exit), a Record's the
//     workers' own time (Result.WorkerSeconds), which Fill derives;
//   - step_time: a pointer left out of a Result without --stats, a value
//     (zeros) always present in a Record, as results.schema.json
//     requires; idle_fraction and bytes_{sent,received}_per_step likewise
//     omitted from a Result when zero, always present in a Record;
//   - staleness: always in a Result (null or a map), left out of a Record
//     that counted no pushes;
//   - mode, model, workers and servers: the same keys, but a Record's name
//     the run as the harness planned it (its mode may be async-overlap or
//     a peer's ddp, its model the harness's label), so the harness sets
//     them and Fill leaves them alone.
//
// Beyond these, a Result is what one launcher saw (wall_seconds, failed
// workers, membership, the dataset and device), a Record what the
// harness compares across runs (the run's ID and command, the NIC model,
// the analytic communication model, the time to the target accuracy).
//
// The package is a leaf: plain data and pure functions, no goroutines.
package record
