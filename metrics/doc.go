// Package metrics exports what a Shoal process does in the Prometheus
// format: a shard's steps, pushes, refusals, waits, staleness, live set
// and checkpoints (NewPS), a worker's steps, samples, phase times and
// traffic (NewWorker), the gRPC server's calls (GRPC), and an HTTP
// endpoint to scrape (Listen). Names follow Prometheus's conventions:
// the shoal_ prefix, base units (seconds, bytes), _total on counters.
//
// A shard's figures are read from ps.Server.Stats when Prometheus
// scrapes, so they cost the shard nothing between scrapes; a worker's
// are observed once per step.
package metrics
