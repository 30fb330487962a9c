package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/shoalml/shoal/bench/collbench"
	"github.com/shoalml/shoal/bench/harness"
	"github.com/shoalml/shoal/flags"
	"github.com/shoalml/shoal/internal/rawtcp"
)

const benchUsage = `Usage: shoal bench <benchmark> [flags]

Benchmarks:
  allreduce   collective bandwidth between processes on this machine (--op picks the collective)
  compute     one worker's forward+backward+update samples/s, no communication
  tcp         one loopback TCP connection's round trip of N bytes each way: the floor under a pull+push
  train       the modes side by side: throughput, step-time breakdown, traffic, accuracy over time, plots
  plan        predicts the modes side by side for --workers workers by simulation (beyond this machine)
  simulate    predicts bench train's runs by simulation: its results.json, report and plots, marked simulated
  emulate     accuracy of async, ssp and sync at --workers workers, trained in one process on simulated schedules
  diff        compares two results.json files of bench train, run by run
  report      renders report.md and the plots again from a results.json
`

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, benchUsage)
		return errUsage
	}
	switch args[0] {
	case "allreduce":
		return runBenchCollective(ctx, args[1:], stdout, stderr)
	case "compute":
		return runBenchCompute(ctx, args[1:], stdout, stderr)
	case "tcp":
		return runBenchTCP(ctx, args[1:], stdout, stderr)
	case "plan":
		return runBenchPlan(ctx, args[1:], stdout, stderr)
	case "emulate":
		return runBenchEmulate(ctx, args[1:], stdout, stderr)
	case "simulate":
		return runBenchSimulate(ctx, args[1:], stdout, stderr)
	case "train":
		return runBenchTrain(ctx, args[1:], stdout, stderr)
	case "diff":
		return runBenchDiff(ctx, args[1:], stdout, stderr)
	case "report":
		return runBenchReport(ctx, args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, benchUsage)
		return nil
	}
	fmt.Fprintf(stderr, "shoal bench: unknown benchmark %q\n\n%s", args[0], benchUsage)
	return errUsage
}

func runBenchTCP(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags.NewFlagSet("bench tcp", "Times round trips over one TCP connection on loopback, in this process: the client\nwrites --bytes, the server reads them all and writes them back, the client reads them\nall. Prints the median, p10 and p90 round trip after --warmup untimed ones, and\nGB/s = 2 x bytes / median (both directions). With --bytes 2678824 (669,706 float32)\nit is the floor under a parameter server's pull+push of a 512,512 MLP.", stderr)
	def := rawtcp.DefaultConfig()
	var (
		bytes   = fs.Int("bytes", def.Bytes, "bytes each way per round trip")
		iters   = fs.Int("iters", def.Iters, "timed round trips")
		warmup  = fs.Int("warmup", def.Warmup, "untimed round trips first")
		jsonOut = fs.Bool("json", false, "print one JSON object")
	)
	if err := flags.Parse(fs, args); err != nil {
		return err
	}
	cfg := def
	cfg.Bytes, cfg.Iters, cfg.Warmup = *bytes, *iters, *warmup
	r, err := rawtcp.Measure(ctx, cfg)
	if err != nil {
		return err
	}
	if *jsonOut {
		return printJSONLine(stdout, r.Record())
	}
	_, err = fmt.Fprintln(stdout, r)
	return err
}

func runBenchCollective(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags.NewFlagSet("bench allreduce", "Measures a collective between --np processes of this binary on loopback and prints,\nper size, the time, algbw = bytes/time and busbw (nccl-tests' definitions), and\nwhether the result was verified correct.", stderr)
	f := &benchCollectiveFlags{}
	f.register(fs)
	if err := flags.Parse(fs, args); err != nil {
		return err
	}
	cfg, err := f.config()
	if err != nil {
		return err
	}
	if f.rank >= 0 {
		return harness.CollectiveRank(ctx, cfg, f.rank, f.master, stdout)
	}
	// The launcher: start the ranks, print what rank 0 reports.
	l, err := newLauncher(stderr)
	if err != nil {
		return err
	}
	defer l.Shutdown()
	if f.tls {
		remove, err := f.sec.Throwaway()
		if err != nil {
			return err
		}
		defer remove()
	}
	return harness.Collective(ctx, l, cfg, f.args(), f.jsonOut, stdout)
}

// benchCollectiveFlags are shoal bench allreduce's flags.
type benchCollectiveFlags struct {
	np, iters, warmup, rank int
	hosts                   int
	nicGbps                 float64
	nicDir                  string
	sizes, op, comp, master string
	alg                     string
	jsonOut, shm, tls       bool
	timeout                 time.Duration
	sec                     flags.Sec
}

func (f *benchCollectiveFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&f.np, "np", 2, "number of processes")
	fs.StringVar(&f.sizes, "sizes", "1MiB,4MiB,16MiB,64MiB", "message sizes per rank")
	fs.IntVar(&f.iters, "iters", 20, "timed iterations per size")
	fs.IntVar(&f.warmup, "warmup", 3, "untimed iterations per size")
	fs.StringVar(&f.op, "op", "allreduce", "collective: allreduce, reducescatter, allgather, broadcast or alltoall")
	fs.BoolVar(&f.jsonOut, "json", false, "one JSON object per line")
	fs.BoolVar(&f.shm, "shared-memory", true, "use shared memory between the processes")
	fs.StringVar(&f.comp, "compression", "none", "wire format of reductions: none, fp16 or bf16")
	fs.StringVar(&f.alg, "allreduce-algorithm", "ring", "allreduce: ring, tree (recursive doubling), hierarchical (by host: see --hosts) or auto (by size, ranks and hosts)")
	fs.IntVar(&f.hosts, "hosts", 1, "fake hosts: rank r on host r*hosts/np, ranks of one host over shared memory (with --shared-memory), of two over TCP")
	fs.Float64Var(&f.nicGbps, "nic-gbps", 0, "with --hosts: each host's ranks share one NIC of this many Gbit/s a direction (the NIC model) on their TCP links, between hosts with --shared-memory (0: none)")
	fs.StringVar(&f.nicDir, "nic-dir", "", "internal: the directory of the hosts' NIC files")
	fs.IntVar(&f.rank, "rank", -1, "internal: run as this rank")
	fs.StringVar(&f.master, "master", "", "internal: rank 0's rendezvous address")
	fs.DurationVar(&f.timeout, "timeout", 2*time.Minute, "deadline of each collective call")
	fs.BoolVar(&f.tls, "tls", false, "the rendezvous and the TCP links over mutual TLS, from a CA made for the run (shared memory stays as it is)")
	f.sec.Register(fs)
}

// config checks the flags and turns them into the benchmark's config.
func (f *benchCollectiveFlags) config() (harness.CollectiveConfig, error) {
	if err := f.sec.Load(); err != nil {
		return harness.CollectiveConfig{}, err
	}
	sz, err := collbench.ParseSizes(f.sizes)
	if err != nil {
		return harness.CollectiveConfig{}, err
	}
	cfg := harness.CollectiveConfig{NP: f.np, Op: f.op, Sizes: sz, Iters: f.iters, Warmup: f.warmup, SharedMemory: f.shm, Timeout: f.timeout,
		Hosts: f.hosts, NICGbps: f.nicGbps, NICDir: f.nicDir, MaxProcsPerCore: maxProcsPerCore}
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	rf := flags.Ring{Compression: f.comp, Algorithm: f.alg}
	if cfg.Compression, err = rf.CompressionMode(); err != nil {
		return cfg, err
	}
	cfg.Security = f.sec.Creds
	cfg.Algorithm, err = rf.AllreduceAlgorithm()
	return cfg, err
}

// args is the command line of every rank, less its rank and rank 0's
// address.
func (f *benchCollectiveFlags) args() []string {
	common := []string{"bench", "allreduce", "--np", strconv.Itoa(f.np), "--sizes", f.sizes, "--iters", strconv.Itoa(f.iters),
		"--warmup", strconv.Itoa(f.warmup), "--op", f.op, "--shared-memory=" + strconv.FormatBool(f.shm), "--compression", f.comp, "--allreduce-algorithm", f.alg,
		"--hosts", strconv.Itoa(f.hosts), "--nic-gbps", strconv.FormatFloat(f.nicGbps, 'g', -1, 64), "--timeout", f.timeout.String()}
	return append(common, f.sec.Args()...)
}
