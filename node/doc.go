// Package node runs one Shoal process end to end, as etcd's embed runs
// one etcd server: RunShard is `shoal ps` (serve one parameter-server
// shard over gRPC, join the job's gossip, checkpoint, drain), RunWorker is
// `shoal worker` (dial the servers or join the ring, gossip, join the run,
// train, report, evaluate). cmd/shoal only parses flags into a
// ShardConfig or WorkerConfig, calls the entry point and returns its
// error.
//
// It is the running layer: it wires the cores (ps, worker, collective)
// to their adapters (rpc, client, collnet, cluster, metrics) and may
// import any of them; nothing but cmd imports it.
//
// Concurrency and ownership: an entry point owns every goroutine it
// starts (gossip followers, stall inspectors, metrics endpoints, the
// gRPC servers) and stops and waits for each before it returns. The
// writer it is handed is written from the caller's goroutine, or through
// a lock where a follower writes too. Configs are copied; the datasets,
// model and timeline are the caller's, not closed.
//
// Example:
//
//	cfg := node.ShardConfig{PS: psCfg, Initial: initial, Listen: "127.0.0.1:0", ExitWait: time.Minute}
//	err := node.RunShard(ctx, cfg, os.Stdout) // until ctx ends
package node
