// Package bench will hold Shoal's benchmark harness: `shoal bench` runs
// modes (async, sync, ssp, ring) × workers × servers × models with the same
// data order, seed and optimizer, records throughput, step-time breakdown,
// traffic, staleness and time to accuracy, compares them with the analytic
// communication model, and writes results.json, report.md and plots. Peers
// measured in the same run (PyTorch with gloo) live in bench/peers/.
//
// Nothing lives here yet.
package bench
