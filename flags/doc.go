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
// (Config → node.ShardConfig), Job everything shoal run takes
// (Config → launch.ProgramConfig; its shards' argv from PS). Defaults that are library choices (the
// lanes a worker opens, a shard's parallel step) come from the packages
// that own them (client.AutoLanes, ps.AutoParallelStep).
//
// Each flag is declared with its Section (what it is for: the job, the
// model and data, the optimizer, the parameter servers, ...), which
// groups a command's help (NewFlagSet) under one heading each; the role
// contracts' flags all have one.
//
// The package parses and checks, and serves nothing. The one thing it
// starts is the membership Gossip.Start joins, which node calls through
// the config's Gossip and which the caller leaves. A group is not safe
// for concurrent use: fill it, then read it.
//
// Example (example_test.go) shows a command parsing a Worker and a
// launcher rendering one for its child.
package flags
