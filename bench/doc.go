// Package bench holds the results side of Shoal's training benchmark:
// `shoal bench train` runs modes (async, sync, ssp, ring) × workers ×
// servers × models with the same data order, seed and optimizer, records
// throughput, step-time breakdown, traffic, staleness and time to accuracy
// in a Results (record.go), compares them with the analytic communication
// model, and writes results.json, report.md and plots. Peers measured in
// the same run (PyTorch with gloo) live in bench/peers/.
//
// The harness's logic lives here, the binary only runs it: the run matrix
// (Plan: DefaultPlan, ParseGrid, Models), the analytic communication model
// (CommModel), scaling efficiency and time to target. Running the matrix,
// and the other `shoal bench` subcommands, is bench/harness's.
//
// results.json follows the JSON Schema in results.schema.json (embedded as
// Schema, documented field by field in docs/bench-schema.md). Validate
// checks a document against it; Load reads, validates and decodes one.
// Diff and WriteDiff compare two files run by run (matched by Record.ID);
// WriteReport writes report.md; WritePlots draws the PNG plots it embeds.
//
// Concurrency: the functions keep no state between calls (the schema is
// compiled once, on first use) and may be called concurrently; they do
// not modify the Results they are given. Diff's rows point into the
// Results passed to it.
//
// Example (example_test.go) turns a results.json into report.md and its
// plots.
package bench
