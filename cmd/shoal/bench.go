package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shoalml/shoal/bench/collbench"
	"github.com/shoalml/shoal/collective"
	"github.com/shoalml/shoal/collective/collnet"
	"github.com/shoalml/shoal/internal/rawtcp"
	"github.com/shoalml/shoal/launch"
	"github.com/shoalml/shoal/secure"
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

// tcpRecord is the line of `shoal bench tcp --json`; times in seconds.
type tcpRecord struct {
	Bytes    int     `json:"bytes"`
	Iters    int     `json:"iters"`
	Warmup   int     `json:"warmup"`
	Median   float64 `json:"median_seconds"`
	P10      float64 `json:"p10_seconds"`
	P90      float64 `json:"p90_seconds"`
	Mean     float64 `json:"mean_seconds"`
	GBps     float64 `json:"gbps"`
	Sent     int64   `json:"sent"`
	Received int64   `json:"received"`
}

func runBenchTCP(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench tcp", "Times round trips over one TCP connection on loopback, in this process: the client\nwrites --bytes, the server reads them all and writes them back, the client reads them\nall. Prints the median, p10 and p90 round trip after --warmup untimed ones, and\nGB/s = 2 x bytes / median (both directions). With --bytes 2678824 (669,706 float32)\nit is the floor under a parameter server's pull+push of a 512,512 MLP.", stderr)
	def := rawtcp.DefaultConfig()
	var (
		bytes   = fs.Int("bytes", def.Bytes, "bytes each way per round trip")
		iters   = fs.Int("iters", def.Iters, "timed round trips")
		warmup  = fs.Int("warmup", def.Warmup, "untimed round trips first")
		jsonOut = fs.Bool("json", false, "print one JSON object")
	)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg := def
	cfg.Bytes, cfg.Iters, cfg.Warmup = *bytes, *iters, *warmup
	r, err := rawtcp.Measure(ctx, cfg)
	if err != nil {
		return err
	}
	if *jsonOut {
		return printJSONLine(stdout, tcpRecord{Bytes: r.Bytes, Iters: r.Iters, Warmup: r.Warmup, Median: r.Median.Seconds(), P10: r.P10.Seconds(),
			P90: r.P90.Seconds(), Mean: r.Mean.Seconds(), GBps: r.GBps, Sent: r.Sent, Received: r.Received})
	}
	_, err = fmt.Fprintf(stdout, "tcp round trip, %d bytes each way, one loopback connection: median %v (p10 %v, p90 %v), %.2f GB/s; %d round trips after %d warm-up\n",
		r.Bytes, r.Median.Round(time.Microsecond), r.P10.Round(time.Microsecond), r.P90.Round(time.Microsecond), r.GBps, r.Iters, r.Warmup)
	return err
}

// parseSizes reads "1MiB,4MiB,512KiB,100".
func parseSizes(s string) ([]int64, error) {
	var out []int64
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		mult := int64(1)
		for _, u := range []struct {
			suffix string
			m      int64
		}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}} {
			if strings.HasSuffix(f, u.suffix) {
				f, mult = strings.TrimSuffix(f, u.suffix), u.m
				break
			}
		}
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil || n < 0 || n*mult%4 != 0 {
			return nil, fmt.Errorf("--sizes %q: want sizes like 1MiB,4MiB,16MiB (whole float32s)", s)
		}
		out = append(out, n*mult)
	}
	return out, nil
}

func runBenchCollective(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench allreduce", "Measures a collective between --np processes of this binary on loopback and prints,\nper size, the time, algbw = bytes/time and busbw (nccl-tests' definitions), and\nwhether the result was verified correct.", stderr)
	var (
		np      = fs.Int("np", 2, "number of processes")
		sizes   = fs.String("sizes", "1MiB,4MiB,16MiB,64MiB", "message sizes per rank")
		iters   = fs.Int("iters", 20, "timed iterations per size")
		warmup  = fs.Int("warmup", 3, "untimed iterations per size")
		op      = fs.String("op", "allreduce", "collective: allreduce, reducescatter, allgather, broadcast or alltoall")
		jsonOut = fs.Bool("json", false, "one JSON object per line")
		shm     = fs.Bool("shared-memory", true, "use shared memory between the processes")
		comp    = fs.String("compression", "none", "wire format of reductions: none, fp16 or bf16")
		rank    = fs.Int("rank", -1, "internal: run as this rank")
		master  = fs.String("master", "", "internal: rank 0's rendezvous address")
		timeout = fs.Duration("timeout", 2*time.Minute, "deadline of each collective call")
		tls     = fs.Bool("tls", false, "the rendezvous and the TCP links over mutual TLS, from a CA made for the run (shared memory stays as it is)")
		sec     secFlags
	)
	sec.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := sec.load(); err != nil {
		return err
	}
	sz, err := parseSizes(*sizes)
	if err != nil {
		return err
	}
	if !slices.Contains(collbench.Ops, *op) {
		return fmt.Errorf("--op %q: want allreduce, reducescatter, allgather, broadcast or alltoall", *op)
	}
	if *np < 1 || *iters < 1 || *warmup < 0 {
		return fmt.Errorf("--np %d, --iters %d, --warmup %d: want np >= 1, iters >= 1, warmup >= 0", *np, *iters, *warmup)
	}
	if limit := maxProcsPerCore * runtime.NumCPU(); *np > limit {
		return fmt.Errorf("--np %d: want at most %d processes on this machine's %d cores (%d a core), as for shoal train", *np, limit, runtime.NumCPU(), maxProcsPerCore)
	}
	rf := ringFlags{compression: *comp}
	compMode, err := rf.compressionMode()
	if err != nil {
		return err
	}
	if *rank >= 0 {
		return benchRank(ctx, *rank, *np, *master, *op, sz, *iters, *warmup, *shm, compMode, *timeout, sec.creds, stdout)
	}

	// The launcher: start the ranks, print what rank 0 reports.
	l, err := newLauncher(stderr)
	if err != nil {
		return err
	}
	defer l.Shutdown()
	if *tls {
		remove, err := sec.throwaway()
		if err != nil {
			return err
		}
		defer remove()
	}
	common := []string{"bench", "allreduce", "--np", strconv.Itoa(*np), "--sizes", *sizes, "--iters", strconv.Itoa(*iters),
		"--warmup", strconv.Itoa(*warmup), "--op", *op, "--shared-memory=" + strconv.FormatBool(*shm), "--compression", *comp, "--timeout", timeout.String()}
	common = append(common, sec.args()...)
	if err := startBenchRanks(ctx, l, *np, common); err != nil {
		return err
	}
	return printBenchResults(ctx, l, *np, *jsonOut, stdout)
}

// startBenchRanks starts np ranks of the benchmark, rank 0 first (it
// serves the rendezvous the others join).
func startBenchRanks(ctx context.Context, l *launch.Launcher, np int, common []string) error {
	addr := "127.0.0.1:0"
	for r := range np {
		c, err := l.Start(ctx, fmt.Sprintf("rank %d", r), r, nil, append(common, "--rank", strconv.Itoa(r), "--master", addr)...)
		if err != nil {
			return err
		}
		if r == 0 {
			ev, err := l.WaitFor(ctx, c, time.Minute, func(e launch.Event) bool { return e.Event == launch.Listening })
			if err != nil {
				return err
			}
			addr = ev.Addr
		}
	}
	return nil
}

// printBenchResults prints rank 0's measurements as they come, until the
// np ranks have exited; a rank's failure or a wrong result is an error.
func printBenchResults(ctx context.Context, l *launch.Launcher, np int, jsonOut bool, stdout io.Writer) error {
	if !jsonOut {
		fmt.Fprintf(stdout, "%-13s %3s %12s %12s %12s %12s  %s\n", "op", "np", "bytes", "time (s)", "algbw GB/s", "busbw GB/s", "correct")
	}
	var failures []string
	for running := np; running > 0; {
		m, err := l.Next(ctx)
		if err != nil {
			return err
		}
		switch {
		case m.Exit:
			running--
			if m.From.Err() != nil {
				failures = append(failures, m.From.Failure())
			}
		case m.Event.Event == launch.Measured && m.Event.Result != nil:
			r := *m.Event.Result
			if jsonOut {
				printJSONLine(stdout, r)
			} else {
				fmt.Fprintf(stdout, "%-13s %3d %12d %12.6f %12.3f %12.3f  %v\n", r.Op, r.NP, r.Bytes, r.Seconds, r.AlgBW, r.BusBW, r.Correct)
			}
			if !r.Correct {
				failures = append(failures, fmt.Sprintf("%s of %d bytes gave a wrong result", r.Op, r.Bytes))
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(failures) > 0 {
		return errors.New(strings.Join(failures, "\n"))
	}
	return nil
}

// benchRank is one process of the benchmark.
func benchRank(ctx context.Context, rank, np int, master, op string, sizes []int64, iters, warmup int, shm bool, comp collective.Compression, timeout time.Duration,
	sec *secure.Credentials, stdout io.Writer) error {
	cfg := collnet.Config{Rank: rank, Size: np, Master: master, JobID: "shoal-bench", SharedMemory: shm, Security: sec}
	if rank == 0 {
		lis, err := collnet.ListenMaster(master)
		if err != nil {
			return err
		}
		cfg.MasterListener = lis
		launch.Emit(stdout, launch.Event{Event: launch.Listening, Addr: lis.Addr().String()})
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	tr, err := collnet.Connect(cctx, cfg)
	cancel()
	if err != nil {
		return err
	}
	defer tr.Close()
	comm, err := collective.New(tr, collective.Config{SegmentBytes: collective.DefaultConfig().SegmentBytes, Compression: comp, CallTimeout: timeout})
	if err != nil {
		return err
	}
	transport := "tcp"
	if shm {
		transport = "shm"
	}
	for _, bytes := range sizes {
		t, correct, err := collbench.Measure(ctx, comm, op, bytes, iters, warmup)
		if err != nil {
			return err
		}
		if rank == 0 {
			alg := float64(bytes) / t / 1e9
			launch.Emit(stdout, launch.Event{Event: launch.Measured, Result: &launch.CollRecord{Op: op, NP: np, Bytes: bytes, Seconds: t, AlgBW: alg,
				BusBW: alg * collbench.BusFactor(op, np), Correct: correct, Transport: transport}})
		}
	}
	return nil
}
