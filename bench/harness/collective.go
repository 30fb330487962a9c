package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shoalml/shoal/bench/collbench"
	"github.com/shoalml/shoal/collective"
	"github.com/shoalml/shoal/collective/collnet"
	"github.com/shoalml/shoal/internal/netshape"
	"github.com/shoalml/shoal/launch"
	"github.com/shoalml/shoal/secure"
)

// CollectiveConfig is one shoal bench allreduce: a collective timed
// between NP processes of this binary on loopback, at each size.
type CollectiveConfig struct {
	NP            int
	Op            string  // one of collbench.Ops
	Sizes         []int64 // bytes per rank
	Iters, Warmup int
	SharedMemory  bool
	Compression   collective.Compression
	Algorithm     collective.Algorithm // Allreduce's
	// Hosts, when > 1, puts rank r on fake host r·Hosts/NP (its
	// collnet.Config.HostID): ranks of one host link over shared memory
	// (with SharedMemory), of two over TCP, and Hierarchical groups them
	// so. 0 and 1: every rank on this machine.
	Hosts int
	// NICGbps, when > 0 (with Hosts > 1), puts each fake host's ranks
	// behind one NIC of that many Gbit/s a direction (the harness's NIC
	// model, internal/netshape, its lines shared by the host's processes
	// through a file in NICDir): their TCP links pass it, which with
	// SharedMemory are the links between hosts only. NICDir is made by
	// Collective for its ranks.
	NICGbps float64
	NICDir  string
	// Timeout is the deadline of each collective call.
	Timeout time.Duration
	// Security, when not nil, is the ranks' mutual TLS.
	Security *secure.Credentials
	// MaxProcsPerCore bounds NP by this machine's cores.
	MaxProcsPerCore int
}

// Validate says what is wrong with cfg, in the flags' words.
func (cfg CollectiveConfig) Validate() error {
	if !slices.Contains(collbench.Ops, cfg.Op) {
		return fmt.Errorf("--op %q: want allreduce, reducescatter, allgather, broadcast or alltoall", cfg.Op)
	}
	if cfg.NP < 1 || cfg.Iters < 1 || cfg.Warmup < 0 {
		return fmt.Errorf("--np %d, --iters %d, --warmup %d: want np >= 1, iters >= 1, warmup >= 0", cfg.NP, cfg.Iters, cfg.Warmup)
	}
	if cfg.Hosts < 0 || cfg.Hosts > cfg.NP {
		return fmt.Errorf("--hosts %d: want 1 to --np (%d): the fake hosts the ranks are dealt to", cfg.Hosts, cfg.NP)
	}
	if !(cfg.NICGbps >= 0) || math.IsInf(cfg.NICGbps, 1) || (cfg.NICGbps > 0 && cfg.Hosts < 2) {
		return fmt.Errorf("--nic-gbps %g with --hosts %d: want a rate >= 0 (0: no NIC model), and with a rate 2 or more hosts, whose ranks share a NIC each", cfg.NICGbps, cfg.Hosts)
	}
	if limit := cfg.MaxProcsPerCore * runtime.NumCPU(); cfg.NP > limit {
		return fmt.Errorf("--np %d: want at most %d processes on this machine's %d cores (%d a core), as for shoal train", cfg.NP, limit, runtime.NumCPU(), cfg.MaxProcsPerCore)
	}
	return nil
}

// Collective starts cfg.NP ranks of the benchmark with l, each this
// binary with args and its rank and rank 0's address, rank 0 first (it
// serves the rendezvous the others join), and prints rank 0's
// measurements as they come (a table row, or with JSON an object) until
// the ranks have exited; a rank's failure or a wrong result is an error.
func Collective(ctx context.Context, l *launch.Launcher, cfg CollectiveConfig, args []string, jsonOut bool, stdout io.Writer) error {
	if cfg.NICGbps > 0 {
		// The hosts' NIC files: every rank maps its host's (a file's
		// shared mapping is the same memory in every process).
		dir, err := os.MkdirTemp("", "shoal-nic-")
		if err != nil {
			return fmt.Errorf("the hosts' NICs: %w", err)
		}
		defer os.RemoveAll(dir)
		args = append(slices.Clip(args), "--nic-dir", dir)
	}
	if err := startRanks(ctx, l, cfg.NP, args); err != nil {
		return err
	}
	return printResults(ctx, l, cfg.NP, jsonOut, stdout)
}

// startRanks starts np ranks of the benchmark, rank 0 first.
func startRanks(ctx context.Context, l *launch.Launcher, np int, common []string) error {
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

// printResults prints rank 0's measurements as they come, until the np
// ranks have exited.
func printResults(ctx context.Context, l *launch.Launcher, np int, jsonOut bool, stdout io.Writer) error {
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
			failures = append(failures, printResult(*m.Event.Result, jsonOut, stdout)...)
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

// printResult prints one measurement, and says whether it was wrong.
func printResult(r launch.CollRecord, jsonOut bool, stdout io.Writer) []string {
	if jsonOut {
		json.NewEncoder(stdout).Encode(r)
	} else {
		fmt.Fprintf(stdout, "%-13s %3d %12d %12.6f %12.3f %12.3f  %v\n", r.Op, r.NP, r.Bytes, r.Seconds, r.AlgBW, r.BusBW, r.Correct)
	}
	if !r.Correct {
		return []string{fmt.Sprintf("%s of %d bytes gave a wrong result", r.Op, r.Bytes)}
	}
	return nil
}

// CollectiveRank is rank of the benchmark, which joins rank 0 at master
// (rank 0 listens there and says where on stdout), times cfg's collective
// at each size, and, rank 0, reports each measurement on stdout.
func CollectiveRank(ctx context.Context, cfg CollectiveConfig, rank int, master string, stdout io.Writer) error {
	comm, closeComm, err := connectRank(ctx, cfg, rank, master, stdout)
	if err != nil {
		return err
	}
	defer closeComm()
	transport := "tcp"
	if cfg.SharedMemory {
		transport = "shm"
		if cfg.Hosts > 1 {
			transport = "shm+tcp"
		}
	}
	for _, bytes := range cfg.Sizes {
		t, correct, err := collbench.Measure(ctx, comm, cfg.Op, bytes, cfg.Iters, cfg.Warmup)
		if err != nil {
			return err
		}
		if rank == 0 {
			alg := float64(bytes) / t / 1e9
			launch.Emit(stdout, launch.Event{Event: launch.Measured, Result: &launch.CollRecord{Op: cfg.Op, NP: cfg.NP, Bytes: bytes, Seconds: t, AlgBW: alg,
				BusBW: alg * collbench.BusFactor(cfg.Op, cfg.NP), Correct: correct, Transport: transport}})
		}
	}
	return nil
}

// connectRank connects rank to the others and returns its communicator
// and how to close its transport.
func connectRank(ctx context.Context, cfg CollectiveConfig, rank int, master string, stdout io.Writer) (*collective.Communicator, func() error, error) {
	ncfg := collnet.Config{Rank: rank, Size: cfg.NP, Master: master, JobID: "shoal-bench", SharedMemory: cfg.SharedMemory, Security: cfg.Security}
	var nic *netshape.NIC // the host's, with NICGbps
	if cfg.Hosts > 1 {
		ncfg.HostID = fmt.Sprintf("%s/fake-host-%d", collnet.DefaultHostID(), rank*cfg.Hosts/cfg.NP)
	}
	if cfg.NICGbps > 0 {
		if cfg.NICDir == "" {
			return nil, nil, errors.New("--nic-gbps without --nic-dir: a rank needs the directory of its host's NIC file, which the launcher makes")
		}
		var err error
		if nic, err = netshape.New(netshape.Config{Gbps: cfg.NICGbps, HostFile: filepath.Join(cfg.NICDir, fmt.Sprintf("host-%d", rank*cfg.Hosts/cfg.NP))}); err != nil {
			return nil, nil, err
		}
		ncfg.WrapData = nic.Conn
	}
	closeNIC := func() {
		if nic != nil {
			nic.Close()
		}
	}
	if rank == 0 {
		lis, err := collnet.ListenMaster(master)
		if err != nil {
			closeNIC()
			return nil, nil, err
		}
		ncfg.MasterListener = lis
		launch.Emit(stdout, launch.Event{Event: launch.Listening, Addr: lis.Addr().String()})
	}
	cctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	tr, err := collnet.Connect(cctx, ncfg)
	cancel()
	if err != nil {
		closeNIC()
		return nil, nil, err
	}
	comm, err := collective.New(tr, collective.Config{SegmentBytes: collective.DefaultConfig().SegmentBytes, Compression: cfg.Compression, CallTimeout: cfg.Timeout, Algorithm: cfg.Algorithm})
	if err != nil {
		tr.Close()
		closeNIC()
		return nil, nil, err
	}
	return comm, func() error {
		defer closeNIC()
		return tr.Close()
	}, nil
}
