// Package flags holds the command-line contracts of Shoal's processes:
// each flag group declares its flags once on a *flag.FlagSet (Register),
// turns them into the config of the package that owns what they set
// (Config, Spec, Logger, Identity, ...), and rebuilds the argv a launcher
// passes to a child (Args). A command, the children that shoal train
// starts, and any future launcher share one declaration, so a flag's
// name, default and help are written in one place.
//
// The groups are small (Model, Opt, Data, Log, Gossip, Sec, NIC, Stats,
// Device, Metrics, Timeline, Train, Rank, Ring, Calls, Shard); the role
// contracts compose them: Worker is everything shoal worker takes
// (Config → node.WorkerConfig), PS everything shoal ps takes
// (Config → node.ShardConfig). Defaults that are library choices (the
// lanes a worker opens, a shard's parallel step) come from the packages
// that own them (client.AutoLanes, ps.AutoParallelStep).
//
// The package parses and checks; it starts no server and no goroutine
// (Gossip.Start, called by node, joins the membership the flags name).
// A group is not safe for concurrent use: fill it, then read it.
//
//	fs := flags.NewFlagSet("worker", "Runs one training worker.", os.Stderr)
//	var w flags.Worker
//	w.Register(fs)
//	if err := flags.Parse(fs, os.Args[2:]); err != nil { ... }
//	cfg, closeModel, err := w.Config(os.Stderr)
//
// A launcher that starts a worker fills a DefaultWorker and renders it:
//
//	child := flags.DefaultWorker()
//	child.Ranks.Rank, child.Events = 3, true
//	argv := append([]string{"worker"}, child.Args()...)
package flags
