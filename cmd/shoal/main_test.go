package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/client"
	"github.com/shoalml/shoal/flags"
	"github.com/shoalml/shoal/internal/cpubind"
	"github.com/shoalml/shoal/internal/lockedio"
	"github.com/shoalml/shoal/internal/testcluster"
	"github.com/shoalml/shoal/launch"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/ps"
	"github.com/shoalml/shoal/shard"
)

// shoalBin is the binary the process tests run, built once by TestMain.
var shoalBin string

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		// A child of an in-process job (trainjob_test.go): this binary
		// plays shoal.
		os.Exit(childMain(os.Args[1:]))
	}
	dir, err := os.MkdirTemp("", "shoal-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	shoalBin = filepath.Join(dir, "shoal")
	out, err := exec.Command("go", "build", "-o", shoalBin, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building shoal: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestCommandLineErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no command", nil, "Usage:"},
		{"unknown command", []string{"serve"}, `unknown command "serve"`},
		{"unknown flag", []string{"train", "--bogus"}, "flag provided but not defined: -bogus"},
		{"stray argument", []string{"ps", "extra"}, `unexpected argument "extra"`},
		{"bad hidden", []string{"train", "--hidden", "12,x"}, `--hidden "12,x"`},
		{"unknown mode", []string{"train", "--mode", "gossip"}, `--mode "gossip"`},
		{"unknown model", []string{"train", "--model", "rnn", "--dataset", "synthetic"}, "rnn"},
		{"bad optimizer", []string{"train", "--optimizer", "lion", "--dataset", "synthetic"}, "lion"},
		{"bad lr", []string{"train", "--lr", "-1", "--dataset", "synthetic"}, "lr -1"},
		{"unknown dataset", []string{"train", "--dataset", "imagenet"}, `--dataset "imagenet"`},
		{"missing data", []string{"train", "--data", "/nonexistent/fmnist"}, "/nonexistent/fmnist"},
		{"no workers", []string{"train", "--workers", "0"}, "--workers 0"},
		{"a negative rank", []string{"worker", "--dataset", "synthetic", "--rank", "-5", "--world-size", "2"}, "--rank -5: want >= 0"},
		{"a negative world size", []string{"worker", "--dataset", "synthetic", "--world-size", "-4"}, "--world-size -4: want >= 0"},
		{"a negative max wait", []string{"ps", "--max-wait", "-1s"}, "--max-wait -1s: want > 0"},
		{"no max wait", []string{"ps", "--max-wait", "0s"}, "--max-wait 0s: want > 0"},
		{"no startup time", []string{"train", "--dataset", "synthetic", "--startup-timeout", "0s"}, "--startup-timeout 0s: want > 0"},
		{"no connect time", []string{"worker", "--dataset", "synthetic", "--connect-timeout", "-1s"}, "--connect-timeout -1s: want > 0"},
		{"no call time", []string{"worker", "--dataset", "synthetic", "--call-timeout", "0s"}, "--call-timeout 0s: want > 0 (every call has a deadline)"},
		{"negative threads", []string{"train", "--threads", "-1"}, "--threads -1: want >= 1, or 0"},
		{"negative lanes", []string{"train", "--dataset", "synthetic", "--lanes", "-1"}, "--lanes -1: want 1..16 connections per server, or 0 for 4 where this machine has 8 or more CPUs, else 1"},
		{"a worker's lanes", []string{"worker", "--dataset", "synthetic", "--lanes", "17"}, "--lanes 17: want 1..16 connections per server, or 0"},
		{"a PS worker's save", []string{"worker", "--dataset", "synthetic", "--mode", "sync", "--save", "m.safetensors"},
			"--save m.safetensors: --mode sync keeps the weights on the parameter servers, and a worker has none to save"},
		{"unknown binding", []string{"train", "--dataset", "synthetic", "--bind", "numa"}, `--bind "numa": want auto, cores or none`},
		{"bound workers beyond the cores", []string{"train", "--dataset", "synthetic", "--bind", "cores", "--workers", "3", "--threads", strconv.Itoa(runtime.NumCPU())},
			fmt.Sprintf("--bind cores: 3 worker(s) × %d thread(s) need %d CPUs, and this process may run on %d", runtime.NumCPU(), 3*runtime.NumCPU(), runtime.NumCPU())},
		// Refused before anything is bound (run is this test's process).
		{"a worker's CPU list backwards", []string{"worker", "--dataset", "synthetic", "--cpus", "1-0"}, `--cpus 1-0: CPU range "1-0": its end is below its start`},
		{"a worker's CPU beyond the machine's", []string{"worker", "--dataset", "synthetic", "--cpus", "1023"}, "--cpus 1023: CPU 1023 is not one this process may run on"},
		{"too many lanes", []string{"train", "--dataset", "synthetic", "--lanes", "17"}, "--lanes 17: want 1..16 connections per server"},
		{"more processes than the cores carry", []string{"train", "--dataset", "synthetic", "--servers", "100000"}, "--workers 2 and --servers 100000: 100002 processes on this machine's"},
		{"more allreduce processes than the cores carry", []string{"bench", "allreduce", "--np", "100000"}, "--np 100000: want at most"},
		{"an unknown allreduce algorithm", []string{"bench", "allreduce", "--allreduce-algorithm", "butterfly"}, `--allreduce-algorithm: unknown allreduce algorithm "butterfly"`},
		{"a NIC model without hosts", []string{"bench", "allreduce", "--nic-gbps", "1"}, "--nic-gbps 1 with --hosts 1: want a rate >= 0 (0: no NIC model), and with a rate 2 or more hosts"},
		{"a server's flags in ring mode", []string{"train", "--dataset", "synthetic", "--mode", "ring", "--staleness", "-5", "--servers", "3"},
			"--servers, --staleness: for the parameter-server modes (async, sync, ssp); --mode ring has no servers and would ignore it: leave it out"},
		{"a ring larger than the cores carry", []string{"train", "--dataset", "synthetic", "--mode", "ring", "--workers", "100000"}, "--workers 100000: 100000 processes on this machine's"},
		{"host aggregation in ring mode", []string{"train", "--dataset", "synthetic", "--mode", "ring", "--host-aggregate"}, "--host-aggregate: for the parameter-server modes (async, sync, ssp); --mode ring allreduces"},
		{"hosts that do not divide the workers", []string{"train", "--dataset", "synthetic", "--mode", "sync", "--workers", "3", "--host-aggregate", "--workers-per-host", "2"},
			"--workers 3, --workers-per-host 2: want a whole number of hosts"},
		{"workers per host without aggregation", []string{"train", "--dataset", "synthetic", "--workers-per-host", "2"}, "--workers-per-host 2: groups the workers for --host-aggregate"},
		{"host aggregation with overlapped pushes", []string{"train", "--dataset", "synthetic", "--host-aggregate", "--overlap-push-pull"}, "--host-aggregate with --overlap-push-pull"},
		{"plan hosts that do not divide the workers", []string{"bench", "plan", "--workers", "64", "--workers-per-host", "3"}, "--workers-per-host 3, --host-gbps 80: want a divisor of --workers 64"},
		{"a host's worker without its group", []string{"worker", "--dataset", "synthetic", "--mode", "sync", "--host-aggregate"}, "--host-aggregate: needs --workers-per-host N"},
		{"local steps in ssp", []string{"train", "--dataset", "synthetic", "--mode", "ssp", "--local-steps", "10"}, "--local-steps 10: for --mode sync or async (the shards apply the pseudo-gradients), have --mode ssp"},
		{"local steps with push-every", []string{"worker", "--dataset", "synthetic", "--local-steps", "10", "--push-every", "2"}, "--local-steps 10: the worker pushes and pulls once a round; leave out --push-every, --fetch-every and --overlap-push-pull"},
		{"negative local steps", []string{"ps", "--mode", "sync", "--local-steps", "-1"}, "--local-steps -1: want 1..1048576, or 0 to push every step's gradient"},
		{"a bad outer optimizer", []string{"ps", "--mode", "sync", "--local-steps", "10", "--outer-lr", "-1"}, "--outer-optimizer, --outer-lr, --outer-momentum: lr -1"},
		{"fragments without local steps", []string{"train", "--dataset", "synthetic", "--mode", "sync", "--fragments", "2"}, "--fragments 2: fragments are synchronised every --local-steps H steps, and there are no local steps: give --local-steps"},
		{"fragments in a ring", []string{"worker", "--dataset", "synthetic", "--mode", "ring", "--fragments", "2"}, "--fragments 2: for --mode sync or async with --local-steps"},
		{"fragments not a divisor", []string{"ps", "--mode", "sync", "--local-steps", "10", "--fragments", "3"}, "--fragments 3 with --local-steps 10: want a divisor of 10"},
		{"fragments in bench train", []string{"bench", "train", "--local-steps", "10", "--fragments", "2"}, "--fragments 2: bench train does not run streaming fragments"},
		{"an outer delay for nesterov", []string{"ps", "--mode", "async", "--local-steps", "10", "--outer-delay", "4"}, "--outer-delay 4: the delay of --outer-optimizer delayed-nesterov; --outer-optimizer nesterov would ignore it: leave it out"},
		{"a negative outer delay", []string{"ps", "--mode", "async", "--local-steps", "10", "--outer-optimizer", "delayed-nesterov", "--outer-delay", "-1"}, "--outer-delay -1: want 1..1048576, or 0 for the pushes of a round"},
		{"compression in a ring run", []string{"run", "-np", "2", "--compression", "bf16", "true"}, "--compression bf16: for the pushes of the parameter-server modes"},
		{"scale-lr with local steps", []string{"train", "--dataset", "synthetic", "--mode", "sync", "--local-steps", "10", "--scale-lr"}, "--scale-lr with --local-steps 10: "},
		{"outer flags in ring mode", []string{"train", "--dataset", "synthetic", "--mode", "ring", "--outer-lr", "1"}, "--outer-lr: for the parameter-server modes"},
		{"recording a sync run", []string{"train", "--dataset", "synthetic", "--mode", "sync", "--record-pushes", "rec"}, "--record-pushes: only async and ssp runs are recorded (have --mode sync)"},
		{"recording a ring worker", []string{"worker", "--dataset", "synthetic", "--mode", "ring", "--record-pushes", "rec.json"}, "--record-pushes: only async and ssp runs are recorded (have --mode ring)"},
		{"unknown device", []string{"train", "--device", "tpu"}, `device "tpu": want auto, cpu, cuda or cuda:N with N >= 0`},
		{"negative GPU", []string{"worker", "--device", "cuda:-1"}, `device "cuda:-1"`},
		{"bad rank", []string{"worker", "--rank", "3", "--world-size", "2"}, "rank 3"},
		{"unknown compression", []string{"worker", "--compression", "int4", "--dataset", "synthetic"}, `--compression: unknown compression "int4"`},
		{"int8 gradients", []string{"worker", "--compression", "int8", "--dataset", "synthetic"}, "--compression int8: for pseudo-gradients only (--local-steps H)"},
		{"int8 gradients in train", []string{"train", "--dataset", "synthetic", "--mode", "sync", "--compression", "int8"}, "--compression int8: for pseudo-gradients only (--local-steps H)"},
		{"int8 in the ring", []string{"train", "--dataset", "synthetic", "--mode", "ring", "--compression", "int8"}, "--compression int8: the ring's allreduce sums in none, fp16 or bf16"},
		{"ps mode without servers", []string{"ps", "--mode", "ring"}, "mode ring: not a parameter-server mode"},
		{"unknown ps mode", []string{"ps", "--mode", "gossip"}, `--mode "gossip": unknown`},
		{"negative checkpoint interval", []string{"ps", "--checkpoint-every", "-1"}, "--checkpoint-every -1: want >= 0 (0: only at shutdown)"},
		{"negative checkpoint interval in train", []string{"train", "--dataset", "synthetic", "--checkpoint-every", "-5"}, "--checkpoint-every -5: want >= 0"},
		{"negative drain", []string{"ps", "--drain-timeout", "-1s"}, "--drain-timeout -1s: want >= 0"},
		{"no call deadline", []string{"train", "--dataset", "synthetic", "--call-timeout", "0s"}, "--call-timeout 0s: want > 0"},
		{"negative retry time", []string{"worker", "--dataset", "synthetic", "--retry-for", "-1s"}, "--retry-for -1s: want >= 0"},
		{"health without an address", []string{"health"}, "shoal health: want one address HOST:PORT after the flags, got 0 argument(s)"},
		{"run without -np", []string{"run", "python3", "train.py"}, "-np 0: want the number of ranks to start, >= 1"},
		{"run without a program", []string{"run", "-np", "2"}, "no program to run"},
		{"run a ring with servers", []string{"run", "-np", "2", "--servers", "2", "python3"}, "--servers: for the parameter-server modes"},
		{"run in an unknown mode", []string{"run", "-np", "2", "--mode", "gossip", "python3"}, `--mode "gossip": unknown`},
		{"run with the servers' optimizer", []string{"run", "-np", "2", "--lr", "0.1", "python3"}, "set the optimizer in PROGRAM"},
		{"push every too many steps", []string{"worker", "--mode", "async", "--push-every", "2000", "--dataset", "synthetic"}, "want --push-every 1..1024"},
		// Where the weights or checkpoints cannot be written, before any
		// training, not after it.
		{"save into a missing folder", []string{"train", "--dataset", "synthetic", "--save", "/nonexistent-shoal/m.safetensors"},
			"--save /nonexistent-shoal/m.safetensors: cannot write there"},
		{"save onto a folder", []string{"train", "--dataset", "synthetic", "--save", os.TempDir()}, "is a directory, want a file path"},
		{"ring rank 0 saves into a missing folder", []string{"worker", "--mode", "ring", "--dataset", "synthetic", "--save", "/nonexistent-shoal/m.safetensors"},
			"--save /nonexistent-shoal/m.safetensors: cannot write there"},
		{"checkpoint folder that cannot be made", []string{"train", "--dataset", "synthetic", "--checkpoint-dir", "/proc/shoal-ckpt"}, "--checkpoint-dir /proc/shoal-ckpt"},
		{"shard checkpoint folder that cannot be made", []string{"ps", "--checkpoint-dir", "/proc/shoal-ckpt"}, "--checkpoint-dir /proc/shoal-ckpt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), tc.args, nil, &stdout, &stderr)
			require.Error(t, err)
			assert.Contains(t, err.Error()+stderr.String(), tc.want)
		})
	}
}

// TestFlagsAModeIgnoresAreRefusedOnce: a shard flag given in a mode that
// ignores it (--staleness outside ssp, --backup-workers outside sync) or
// that the mode cannot do (as many backup workers as workers) is refused
// in one line naming the mode that takes it, by shoal train before any
// process starts (not by a shard and again by the launcher that read its
// last words), and alike by shoal ps and shoal run.
func TestFlagsAModeIgnoresAreRefusedOnce(t *testing.T) {
	job := []string{"--dataset", "synthetic", "--hidden", "8", "--steps", "1", "--threads", "1", "--test=false"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"a bound in async", append([]string{"train", "--mode", "async", "--staleness", "3"}, job...),
			"--staleness 3: the bound of --mode ssp; --mode async would ignore it: leave it out, or run --mode ssp"},
		{"a bound in sync", append([]string{"train", "--mode", "sync", "--staleness", "0"}, job...), "--staleness 0: the bound of --mode ssp; --mode sync would ignore it"},
		{"backups in async", append([]string{"train", "--mode", "async", "--backup-workers", "1", "--workers", "3"}, job...),
			"--backup-workers 1: for --mode sync, whose steps wait for the workers but this many; --mode async would ignore it"},
		{"as many backups as workers", append([]string{"train", "--mode", "sync", "--backup-workers", "2", "--workers", "2"}, job...),
			"--backup-workers 2: want fewer than --workers 2"},
		{"a shard's bound in async", []string{"ps", "--mode", "async", "--staleness", "2"}, "--staleness 2: the bound of --mode ssp; --mode async would ignore it"},
		{"a shard's backups in ssp", []string{"ps", "--mode", "ssp", "--workers", "3", "--backup-workers", "1"}, "--backup-workers 1: for --mode sync"},
		{"shoal run's bound in sync", []string{"run", "-np", "2", "--mode", "sync", "--staleness", "2", "true"}, "--staleness 2: the bound of --mode ssp; --mode sync would ignore it"},
		{"the resident ring step in async", append([]string{"train", "--mode", "async", "--device-resident"}, job...),
			"--device-resident: for --mode ring, whose ranks run the optimizer themselves; --mode async would ignore it"},
		{"the resident ring step on the CPU", append([]string{"train", "--mode", "ring", "--device", "cpu", "--device-resident"}, job...),
			"--device-resident: keeps the weights on a GPU, but --device cpu places worker 0 on the CPU"},
		{"a worker's resident step in sync", []string{"worker", "--mode", "sync", "--device-resident"}, "--device-resident: for --mode ring"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := exec.CommandContext(ctxT(t, time.Minute), shoalBin, tc.args...).CombinedOutput()
			require.Error(t, err, "%s", out)
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			assert.Len(t, lines, 1, "one line says it:\n%s", out)
			assert.True(t, strings.HasPrefix(lines[0], "shoal: "+tc.want), "%s", out)
			assert.NotContains(t, string(out), "[ps 0]", "refused before a shard started")
		})
	}
}

// TestHelpGroupsEveryRolesFlags: shoal train, ps, worker and run list
// their flags under a heading of what each is for, none of them in an
// ungrouped list (which the help falls back to where a flag was declared
// without a flags.Section).
func TestHelpGroupsEveryRolesFlags(t *testing.T) {
	fs := flag.NewFlagSet("train", flag.ContinueOnError)
	new(trainRun).register(fs)
	assert.Empty(t, flags.Unsectioned(fs), "shoal train: declare these flags with a flags.Section's Usage")
	for _, role := range []string{"train", "ps", "worker", "run"} {
		var stderr bytes.Buffer
		require.ErrorIs(t, run(context.Background(), []string{role, "-h"}, nil, io.Discard, &stderr), flag.ErrHelp)
		help := stderr.String()
		assert.True(t, strings.Contains(help, "\nThe job (its mode, its processes, how long it trains):\n  -"), "shoal %s: the job's heading", role)
		assert.False(t, strings.Contains(help, "\nFlags:\n"), "shoal %s: a list of flags without a section", role)
		assert.False(t, strings.Contains(help, "\x00"), "shoal %s: a section's mark shown", role)
	}
}

func TestVersion(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"version"}, nil, &out, io.Discard))
	assert.Regexp(t, `^shoal \S+ revision \S+`, out.String())
}

// TestTrainEndToEnd runs the launcher with two servers and two workers on
// synthetic data and checks the summary and the saved weights.
func TestTrainEndToEnd(t *testing.T) {
	save := filepath.Join(t.TempDir(), "model.safetensors")
	cmd := exec.CommandContext(ctxT(t, 3*time.Minute), shoalBin, "train", "--dataset", "synthetic", "--workers", "2", "--servers", "2",
		"--hidden", "64", "--chunk-bytes", "65536", "--epochs", "2", "--batch", "32", "--threads", "1", "--json", "--save", save)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "stderr: %s", stderr.String())
	sum := lastJSON(t, string(out))
	for _, k := range []string{"mode", "model", "workers", "servers", "epochs", "steps", "test_accuracy", "test_loss", "samples_per_sec", "wall_seconds"} {
		assert.Contains(t, sum, k)
	}
	assert.Equal(t, "async", sum["mode"])
	assert.Equal(t, float64(2), sum["workers"])
	assert.Equal(t, float64(2), sum["servers"])
	assert.Equal(t, float64(1), sum["threads"], "--threads 1: one GEMM thread a worker")
	assert.Equal(t, float64(2), sum["epochs"])
	assert.Greater(t, sum["test_accuracy"], 0.9)
	// The run names the set it trains on, not the one it tests on.
	assert.Equal(t, "synthetic/train", sum["dataset"])
	assert.Equal(t, "synthetic/test", sum["test_dataset"])
	assert.Contains(t, string(out), ", synthetic/train (6000 samples; tested on synthetic/test)\n")
	assert.Contains(t, string(out), "epoch 1/2")
	assert.Contains(t, string(out), "epoch 2/2")

	l, vec, meta, err := nn.LoadSafetensors(save)
	require.NoError(t, err)
	model, err := nn.New(nn.Spec{Arch: "mlp", Hidden: []int{64}}, nn.NewCPU())
	require.NoError(t, err)
	assert.True(t, l.Equal(model.Layout()), "saved layout %v", l)
	assert.Len(t, vec, model.Layout().Size())
	assert.Equal(t, "mlp 784-64-10", meta["shoal_model"])
}

// TestTrainHostAggregate: 4 sync workers as 2 hosts of 2 train through
// the servers, which count hosts; only the hosts' first ranks push, so
// the workers' mean traffic a step is half what it is without.
func TestTrainHostAggregate(t *testing.T) {
	run := func(extra ...string) (map[string]any, string) {
		args := append([]string{"train", "--dataset", "synthetic", "--mode", "sync", "--workers", "4", "--servers", "1",
			"--hidden", "32", "--epochs", "1", "--batch", "32", "--threads", "1", "--lr", "0.1", "--stats", "--json"}, extra...)
		cmd := exec.CommandContext(ctxT(t, 3*time.Minute), shoalBin, args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		require.NoError(t, err, "stderr: %s", stderr.String())
		return lastJSON(t, string(out)), string(out)
	}
	alone, _ := run()
	sum, out := run("--host-aggregate", "--workers-per-host", "2")
	assert.Contains(t, out, "host aggregation: 2 host(s) of 2 workers")
	assert.Equal(t, alone["steps"], sum["steps"])
	assert.Greater(t, sum["test_accuracy"], 0.8)
	// Half the workers push a vector a step: half the mean per worker.
	sent, sentAlone := sum["bytes_sent_per_step"].(float64), alone["bytes_sent_per_step"].(float64)
	assert.InDelta(t, 0.5, sent/sentAlone, 0.05, "bytes sent a step: %v with hosts, %v without", sent, sentAlone)
}

// proc is a child process whose stdout JSON events are read in the
// background.
type proc struct {
	cmd    *exec.Cmd
	events chan launch.Event
	done   chan error
	stderr *lockedio.Buffer
}

func startProc(t testing.TB, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(shoalBin, args...)
	p := &proc{cmd: cmd, events: make(chan launch.Event, 1024), done: make(chan error, 1), stderr: lockedio.NewBuffer()}
	cmd.Stderr = p.stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var ev launch.Event
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				select {
				case p.events <- ev:
				default: // the test reads only some events
				}
			}
		}
		close(p.events)
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		for range p.events {
		}
		<-p.done
	})
	return p
}

// next waits for the next event satisfying ok.
func (p *proc) next(t testing.TB, ctx context.Context, what string, ok func(launch.Event) bool) launch.Event {
	t.Helper()
	for {
		select {
		case ev, open := <-p.events:
			if !open {
				t.Fatalf("process exited while waiting for %s; stderr:\n%s", what, p.stderr)
			}
			if ok(ev) {
				return ev
			}
		case <-ctx.Done():
			t.Fatalf("no %s before the deadline; stderr:\n%s", what, p.stderr)
		}
	}
}

// exit waits until the process has exited and returns its error (nil
// for a clean exit), which stays there for a later exit and the cleanup.
// what names the process in the failure when ctx ends first.
func (p *proc) exit(t testing.TB, ctx context.Context, what string) error {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err
		return err
	case <-ctx.Done():
		t.Fatalf("%s did not exit before the deadline; stderr:\n%s", what, p.stderr)
		return nil
	}
}

// TestKillingAWorkerDoesNotDisturbTheServer kills one of two async workers
// mid-run with SIGKILL and checks that the other keeps training and the
// server keeps serving.
func TestKillingAWorkerDoesNotDisturbTheServer(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	ps := startProc(t, "ps", "--listen", "127.0.0.1:0", "--events", "--hidden", "64")
	addr := ps.next(t, ctx, "listening event", func(e launch.Event) bool { return e.Event == "listening" }).Addr

	workerArgs := func(rank int) []string {
		return []string{"worker", "--servers", addr, "--rank", fmt.Sprint(rank), "--world-size", "2", "--events", "--hidden", "64",
			"--dataset", "synthetic", "--batch", "16", "--steps", "100000000"}
	}
	w0 := startProc(t, workerArgs(0)...)
	w1 := startProc(t, workerArgs(1)...)
	isProgress := func(e launch.Event) bool { return e.Event == "progress" }
	w1.next(t, ctx, "progress of worker 1", isProgress)
	w0.next(t, ctx, "progress of worker 0", isProgress)

	require.NoError(t, w1.cmd.Process.Kill())
	require.Error(t, w1.exit(t, ctx, "worker 1"), "worker 1 should have died of SIGKILL")

	// Worker 0 keeps training: it reports progress beyond where it was.
	mark := w0.next(t, ctx, "progress of worker 0", isProgress)
	w0.next(t, ctx, "later progress of worker 0", func(e launch.Event) bool {
		return isProgress(e) && (e.Epoch > mark.Epoch || e.Step > mark.Step)
	})

	// The server still answers: health SERVING, a pull of finite values.
	assertServing(t, ctx, addr)
	cl, err := client.Dial(ctx, []string{addr})
	require.NoError(t, err)
	defer cl.Close()
	params := make([]float32, cl.Info().Plan.VectorLen)
	clocks, err := cl.Pull(ctx, params)
	require.NoError(t, err)
	assert.Positive(t, clocks[0])

	// Both stop cleanly on SIGTERM.
	require.NoError(t, w0.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, ps.cmd.Process.Signal(syscall.SIGTERM))
	assert.NoError(t, ps.exit(t, ctx, "ps after SIGTERM"), "ps exit; stderr:\n%s", ps.stderr)
	assert.NoError(t, w0.exit(t, ctx, "worker 0 after SIGTERM"), "worker 0 exit; stderr:\n%s", w0.stderr)
}

// TestInterruptLeavesNoProcess sends SIGINT to shoal train mid-run and
// checks that it exits and that none of its children survive.
func TestInterruptLeavesNoProcess(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	cmd := exec.Command(shoalBin, "train", "--dataset", "synthetic", "--hidden", "32", "--steps", "100000000", "--batch", "16")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stderr := lockedio.NewBuffer()
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	// Training is under way once the first epoch line is printed.
	for started := false; !started; {
		select {
		case l, ok := <-lines:
			require.True(t, ok, "train exited early; stderr:\n%s", stderr.String())
			started = strings.HasPrefix(l, "epoch 1/")
		case <-ctx.Done():
			t.Fatal("no epoch line before the deadline")
		}
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	for range lines {
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, 130, ee.ExitCode(), "stderr:\n%s", stderr.String())
	assert.Empty(t, childrenOf(shoalBin), "processes of this binary left running")
}

// childrenOf lists running processes whose command line starts with bin.
func childrenOf(bin string) []string {
	var left []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil || !bytes.HasPrefix(b, []byte(bin+"\x00")) {
			continue
		}
		if st, err := os.ReadFile(filepath.Join(d, "stat")); err == nil && bytes.Contains(st, []byte(") Z ")) {
			continue // a zombie: already dead
		}
		left = append(left, fmt.Sprintf("%s: %s", d, bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
	}
	return left
}

// trainSave runs shoal train with args and --save, and returns the saved
// vector.
func trainSave(t *testing.T, args ...string) []float32 {
	t.Helper()
	save := filepath.Join(t.TempDir(), "w.safetensors")
	cmd := exec.CommandContext(ctxT(t, 3*time.Minute), shoalBin, append([]string{"train", "--save", save}, args...)...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	_, vec, _, err := nn.LoadSafetensors(save)
	require.NoError(t, err)
	return vec
}

// TestSyncEquivalenceThroughTheCommandLine: N sync workers of batch 16
// over S servers save the weights one worker of batch N·16 on one server
// saves, for N in {1, 2, 4} and S in {1, 2, 3, 5}, with the default
// --chunk-bytes: the 25,450-float model is less than one default chunk,
// and every shard still owns a share and takes part in every step.
func TestSyncEquivalenceThroughTheCommandLine(t *testing.T) {
	common := []string{"--mode", "sync", "--dataset", "synthetic", "--hidden", "32",
		"--steps", "50", "--optimizer", "sgd", "--lr", "0.1"}
	for _, n := range []int{1, 2, 4} {
		one := trainSave(t, append(common, "--workers", "1", "--servers", "1", "--batch", fmt.Sprint(16*n))...)
		for _, s := range []int{1, 2, 3, 5} {
			t.Run(fmt.Sprintf("N=%d S=%d", n, s), func(t *testing.T) {
				got := trainSave(t, append(common, "--workers", fmt.Sprint(n), "--servers", fmt.Sprint(s), "--batch", "16")...)
				require.Len(t, got, len(one))
				rel := testcluster.RelErr(got, one)
				t.Logf("relative error %.2e", rel)
				assert.LessOrEqual(t, rel, 1e-5)
			})
		}
		// Push-pulls split over lanes (13 chunks a shard, 3 lanes), the
		// servers updating their chunks in parallel.
		t.Run(fmt.Sprintf("N=%d S=2 lanes=3 parallel-step", n), func(t *testing.T) {
			got := trainSave(t, append(common, "--workers", fmt.Sprint(n), "--servers", "2", "--batch", "16", "--chunk-bytes", "8192", "--lanes", "3", "--parallel-step")...)
			rel := testcluster.RelErr(got, one)
			t.Logf("relative error %.2e", rel)
			assert.LessOrEqual(t, rel, 1e-5)
		})
	}
}

// TestLocalStepsThroughTheCommandLine: the DiLoCo flags reach the
// workers (inner optimizer, its cosine decay over the worker's steps)
// and the shards (outer optimizer): one local step with outer SGD at lr 1
// saves sync's weights (N=2, S=2), and so do one worker's 5 local steps
// (its pseudo-gradient makes the global weights its own).
func TestLocalStepsThroughTheCommandLine(t *testing.T) {
	common := []string{"--mode", "sync", "--dataset", "synthetic", "--hidden", "32", "--steps", "50", "--optimizer", "sgd", "--lr", "0.1", "--batch", "16",
		"--outer-optimizer", "sgd", "--outer-lr", "1"}
	for _, tc := range []struct{ workers, servers, h int }{{2, 2, 1}, {1, 2, 5}} {
		t.Run(fmt.Sprintf("N=%d S=%d H=%d", tc.workers, tc.servers, tc.h), func(t *testing.T) {
			run := append(common, "--workers", fmt.Sprint(tc.workers), "--servers", fmt.Sprint(tc.servers))
			want := trainSave(t, run...)
			got := trainSave(t, append(run, "--local-steps", fmt.Sprint(tc.h))...)
			rel := testcluster.RelErr(got, want)
			t.Logf("relative error %.2e", rel)
			assert.LessOrEqual(t, rel, 1e-5)
		})
	}
}

// TestLocalStepsSendFewerBytes: --stats counts what each worker sent; with
// H = 5 local steps it is at least H/2 times less per step than sync's
// (the bar), and train prints it per sample.
func TestLocalStepsSendFewerBytes(t *testing.T) {
	sent := func(extra ...string) (float64, string) {
		// extra's flags come last: a --steps there overrides the 40.
		args := append([]string{"train", "--dataset", "synthetic", "--hidden", "32", "--mode", "sync", "--workers", "2", "--steps", "40", "--stats", "--json"}, extra...)
		out, err := exec.CommandContext(ctxT(t, 3*time.Minute), shoalBin, args...).CombinedOutput()
		require.NoError(t, err, "%s", out)
		b, ok := lastJSON(t, string(out))["bytes_sent_per_step"].(float64)
		require.True(t, ok, "%s", out)
		return b, string(out)
	}
	sync, _ := sent()
	local, out := sent("--local-steps", "5")
	t.Logf("bytes sent per step: sync %.0f, 5 local steps %.0f", sync, local)
	assert.GreaterOrEqual(t, sync/local, 2.5)
	assert.Contains(t, out, "traffic: each worker sent ")

	// Streaming fragments: the same bytes per step (each exchange 1/F of
	// the vector, F times as many), within the exchanges' headers. Over
	// 200 steps: a worker's step log sometimes misses the bytes of its
	// run's last push (seen in CI: 4 whole-vector pushes in 40 steps
	// counted as 3.5 on average), which over 4 rounds is 12% and over 20
	// is 2.5%.
	frags, out := sent("--steps", "200", "--local-steps", "10", "--fragments", "5")
	whole, _ := sent("--steps", "200", "--local-steps", "10")
	t.Logf("bytes sent per step: 10 local steps %.0f, in 5 fragments %.0f", whole, frags)
	assert.InEpsilon(t, whole, frags, 0.1)
	assert.Contains(t, out, "in 5 fragment(s), one every 2 steps, 1 step(s) overlapped")
}

// TestEveryShardCountTrains: sync and SSP runs of the default model over
// 3 and 8 servers train to the end (with plan v1 the default MLP was one
// chunk, and shards without one held the barrier shut), and the servers
// applied every step: the saved weights moved on every shard.
func TestEveryShardCountTrains(t *testing.T) {
	arch := flags.Model{Arch: "mlp", Hidden: "256,128", Seed: 1} // the defaults
	model, err := arch.Build()
	require.NoError(t, err)
	before := make([]float32, model.Layout().Size())
	model.Init(before, arch.Seed)
	for _, mode := range []string{"sync", "ssp"} {
		for _, s := range []int{3, 8} {
			t.Run(fmt.Sprintf("%s S=%d", mode, s), func(t *testing.T) {
				after := trainSave(t, "--mode", mode, "--workers", "4", "--servers", fmt.Sprint(s), "--dataset", "synthetic", "--steps", "5")
				require.Len(t, after, len(before))
				plan, err := shard.New(len(before), s, shard.DefaultChunkBytes)
				require.NoError(t, err)
				for sh := range s {
					moved := false
					for _, r := range plan.Ranges(sh) {
						for i := r.Off; i < r.End() && !moved; i++ {
							moved = after[i] != before[i]
						}
					}
					assert.True(t, moved, "shard %d's values never changed", sh)
				}
			})
		}
	}
}

// TestServerRestartsFromItsCheckpoint kills a server with SIGKILL mid-run
// and restarts it on the same address: it resumes from its checkpoint and
// the worker's run finishes.
func TestServerRestartsFromItsCheckpoint(t *testing.T) {
	for _, journal := range []bool{false, true} {
		t.Run(fmt.Sprintf("journal=%v", journal), func(t *testing.T) { serverRestart(t, journal) })
	}
}

// serverRestart SIGKILLs the only shard of a one-worker async run and
// starts it again on the same address from its checkpoints. Each of the
// worker's 1500 steps is one push, so the shard's final clock counts the
// pushes applied: with the journal exactly 1500 (none lost, none applied
// twice); without it, the updates after the last checkpoint are lost.
func serverRestart(t *testing.T, journal bool) {
	ctx := ctxT(t, 3*time.Minute)
	dir := t.TempDir()
	psArgs := func(listen string) []string {
		return []string{"ps", "--listen", listen, "--events", "--hidden", "32", "--checkpoint-dir", dir, "--checkpoint-every", "20",
			"--journal=" + fmt.Sprint(journal), "--log-level", "info"}
	}
	ps1 := startProc(t, psArgs("127.0.0.1:0")...)
	addr := ps1.next(t, ctx, "listening event", func(e launch.Event) bool { return e.Event == "listening" }).Addr
	w := startProc(t, "worker", "--servers", addr, "--events", "--hidden", "32", "--dataset", "synthetic", "--batch", "16", "--steps", "1500")
	w.next(t, ctx, "progress", func(e launch.Event) bool { return e.Event == "progress" && e.Step >= 70 })

	require.NoError(t, ps1.cmd.Process.Kill())
	require.Error(t, ps1.exit(t, ctx, "the killed server"))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.NotEmpty(t, entries, "no checkpoint written before the kill")

	ps2 := startProc(t, psArgs(addr)...)
	ps2.next(t, ctx, "listening event of the restarted server", func(e launch.Event) bool { return e.Event == "listening" })
	done := w.next(t, ctx, "the worker's done event", func(e launch.Event) bool { return e.Event == "done" })
	assert.Equal(t, int64(1500), done.Steps)
	require.NoError(t, w.exit(t, ctx, "the worker"), "worker stderr:\n%s", w.stderr)
	assert.Contains(t, ps2.stderr.String(), "resumed from checkpoint")
	cl, err := client.Dial(ctx, []string{addr})
	require.NoError(t, err)
	defer cl.Close()
	clocks, err := cl.Pull(ctx, make([]float32, cl.Info().Plan.VectorLen))
	require.NoError(t, err)
	if journal {
		// (When the kill lands right after a checkpoint the journal holds
		// nothing past it, and there is nothing to replay.)
		assert.Equal(t, int64(1500), clocks[0], "every push applied exactly once across the restart")
	} else {
		assert.LessOrEqual(t, clocks[0], int64(1500))
		t.Logf("without the journal the restart lost %d of 1500 updates", 1500-clocks[0])
	}
	require.NoError(t, ps2.cmd.Process.Signal(syscall.SIGTERM))
}

// TestKillingARingRank kills rank 2 of a four-rank ring mid-run: every
// other rank exits within the collective deadline with an error naming
// rank 2, also those that only saw a neighbour leave because of it.
func TestKillingARingRank(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	args := func(rank int, master string) []string {
		return []string{"worker", "--mode", "ring", "--rank", fmt.Sprint(rank), "--world-size", "4", "--master", master,
			"--dataset", "synthetic", "--hidden", "32", "--batch", "16", "--steps", "100000000", "--events", "--call-timeout", "30s"}
	}
	r0 := startProc(t, args(0, "127.0.0.1:0")...)
	master := r0.next(t, ctx, "rendezvous address", func(e launch.Event) bool { return e.Event == "listening" }).Addr
	ranks := []*proc{r0, startProc(t, args(1, master)...), startProc(t, args(2, master)...), startProc(t, args(3, master)...)}
	for _, p := range ranks {
		p.next(t, ctx, "progress", func(e launch.Event) bool { return e.Event == "progress" })
	}
	require.NoError(t, ranks[2].cmd.Process.Kill())
	require.Error(t, ranks[2].exit(t, ctx, "rank 2"))
	for _, r := range []int{0, 1, 3} {
		p := ranks[r]
		require.Error(t, p.exit(t, ctx, fmt.Sprintf("rank %d", r)), "rank %d must fail", r)
		msg := p.stderr.String()
		assert.True(t, strings.Contains(msg, ": rank 2: ") || strings.Contains(msg, "the first failure: rank 2,"),
			"rank %d does not name the killed rank 2:\n%s", r, msg)
	}
}

// childWith is the pid of the child of parent whose command line holds
// flag followed by value.
func childWith(t *testing.T, parent int, flag, value string) int {
	t.Helper()
	dirs, err := os.ReadDir("/proc")
	require.NoError(t, err)
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after ')'.
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(parent) {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		args := strings.Split(string(cmdline), "\x00")
		for i := range len(args) {
			// --flag value, or --flag=value as flags' Args renders it.
			if args[i] == flag+"="+value || i+1 < len(args) && args[i] == flag && args[i+1] == value {
				return pid
			}
		}
	}
	t.Fatalf("no child of %d with %s %s", parent, flag, value)
	return 0
}

// TestServingBeyondLoopbackWarns: shoal ps serves on loopback unless
// --listen says otherwise; beyond loopback it warns at start that there is
// no TLS or authentication, unless --insecure says that is meant. (The
// listener on all interfaces gets no traffic here.)
func TestServingBeyondLoopbackWarns(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	for _, tc := range []struct {
		args  []string
		warns bool
	}{
		{[]string{"--listen", "127.0.0.1:0"}, false},
		{[]string{"--listen", ":0"}, true},
		{[]string{"--listen", ":0", "--insecure"}, false},
	} {
		p := startProc(t, append([]string{"ps", "--events", "--hidden", "16"}, tc.args...)...)
		p.next(t, ctx, "listening event", func(e launch.Event) bool { return e.Event == "listening" })
		// Once it has exited, all it wrote to stderr has been read.
		require.NoError(t, p.cmd.Process.Kill())
		_ = p.exit(t, ctx, "shoal ps")
		assert.Equal(t, tc.warns, strings.Contains(p.stderr.String(), "no TLS and no authentication"), "%v: %s", tc.args, p.stderr.String())
	}
}

// TestAShardWhoseCheckpointsFailStops: an unwritable --checkpoint-dir
// during the run (here the folder became a file) no longer leaves the
// shard serving with only error lines in its log: it stops with exit 1
// and says why, unless --checkpoint-errors warn.
func TestAShardWhoseCheckpointsFailStops(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	dir := filepath.Join(t.TempDir(), "ckpt")
	p := startProc(t, "ps", "--listen", "127.0.0.1:0", "--events", "--hidden", "16", "--checkpoint-dir", dir, "--checkpoint-every", "1")
	addr := p.next(t, ctx, "listening event", func(e launch.Event) bool { return e.Event == "listening" }).Addr
	require.NoError(t, os.RemoveAll(dir))
	require.NoError(t, os.WriteFile(dir, nil, 0o644))
	cl, err := client.Dial(ctx, []string{addr})
	require.NoError(t, err)
	defer cl.Close()
	_, err = cl.Push(ctx, client.PushArgs{WorkerID: 0, Step: 0, Grads: make([]float32, cl.Info().Plan.VectorLen)})
	require.NoError(t, err, "the push itself is applied")
	err = p.exit(t, ctx, "shoal ps")
	require.Error(t, err, "the shard should stop")
	assert.Contains(t, p.stderr.String(), "checkpoint at clock 1 into "+dir)
	assert.Contains(t, p.stderr.String(), "the shard stopped (--checkpoint-errors warn")
}

// TestWorkersBoundToCoresOfTheirOwn: with --bind cores each worker runs
// on cores of its own, in rank order, as the workers themselves report
// their affinity after binding (PS and ring); with --bind none no worker
// is bound.
func TestWorkersBoundToCoresOfTheirOwn(t *testing.T) {
	allowed, err := cpubind.Allowed()
	if err != nil {
		t.Skipf("cannot read this process's CPUs here: %v", err)
	}
	if len(allowed) < 2 {
		t.Skipf("this process may run on CPU %s only: two workers cannot have cores of their own", cpubind.Format(allowed))
	}
	want := []string{strconv.Itoa(allowed[0]), strconv.Itoa(allowed[1])}
	job := []string{"--dataset", "synthetic", "--workers", "2", "--threads", "1", "--steps", "3", "--test=false"}
	for _, mode := range []string{"async", "ring"} {
		res, out := trainJSON(t, nil, append([]string{"--mode", mode, "--bind", "cores"}, job...)...)
		assert.Equal(t, want, res.CPUs, "%s:\n%s", mode, out)
	}
	res, out := trainJSON(t, nil, append([]string{"--bind", "none"}, job...)...)
	assert.Nil(t, res.CPUs, out)
}

// TestBindPlan: auto binds where the workers take the CPUs (fewer than
// --threads left over), so that two runs side by side on a large machine
// are not both bound to its first cores; cores binds wherever they fit.
func TestBindPlan(t *testing.T) {
	cpus := func(n int) []int {
		c := make([]int, n)
		for i := range c {
			c[i] = i + 4 // not from 0: the sets come from what is allowed
		}
		return c
	}
	for _, tc := range []struct {
		mode             string
		allowed          int
		workers, threads int
		want             [][]int
		err              string
	}{
		{"auto", 2, 2, 1, [][]int{{4}, {5}}, ""},
		{"auto", 16, 2, 8, [][]int{{4, 5, 6, 7, 8, 9, 10, 11}, {12, 13, 14, 15, 16, 17, 18, 19}}, ""},
		{"auto", 16, 3, 5, [][]int{{4, 5, 6, 7, 8}, {9, 10, 11, 12, 13}, {14, 15, 16, 17, 18}}, ""}, // one CPU over
		{"auto", 16, 2, 1, nil, ""}, // room for 14 more workers
		{"auto", 2, 3, 1, nil, ""},  // oversubscribed: not bound
		{"cores", 16, 2, 1, [][]int{{4}, {5}}, ""},
		{"cores", 2, 3, 1, nil, "--bind cores: 3 worker(s) × 1 thread(s) need 3 CPUs, and this process may run on 2 (4-5)"},
		{"none", 2, 2, 1, nil, ""},
		{"numa", 2, 2, 1, nil, `--bind "numa": want auto, cores or none`},
	} {
		name := fmt.Sprintf("%s %d CPUs %d×%d", tc.mode, tc.allowed, tc.workers, tc.threads)
		got, err := bindPlan(tc.mode, cpus(tc.allowed), nil, tc.workers, tc.threads)
		if tc.err != "" {
			assert.ErrorContains(t, err, tc.err, name)
			continue
		}
		require.NoError(t, err, name)
		assert.Equal(t, tc.want, got, name)
	}
	_, err := bindPlan("cores", nil, cpubind.ErrUnsupported, 2, 1)
	assert.ErrorContains(t, err, "--bind cores: binding to CPUs needs Linux")
	got, err := bindPlan("auto", nil, cpubind.ErrUnsupported, 2, 1)
	assert.NoError(t, err, "auto where CPUs cannot be read binds nothing")
	assert.Nil(t, got)
}

// TestTheJSONSaysTheLanesTheWorkersUsed: shoal train --json reports the
// lanes as the workers resolved --lanes (what it asked where the server's
// share has the chunks, one per chunk where it has fewer, and --lanes 0's
// choice for this machine), and whether the server's step ran in parallel.
func TestTheJSONSaysTheLanesTheWorkersUsed(t *testing.T) {
	common := []string{"--mode", "async", "--dataset", "synthetic", "--hidden", "32", "--steps", "5", "--workers", "2", "--servers", "1"}
	for _, c := range []struct {
		name  string
		args  []string
		lanes int
		par   bool
	}{
		// The 25,450-float model is 13 chunks of 8 KiB, and less than
		// one of the default 1 MiB.
		{"3 of 13 chunks", []string{"--chunk-bytes", "8192", "--lanes", "3", "--parallel-step"}, 3, true},
		{"4 of 1 chunk", []string{"--lanes", "4", "--parallel-step=false"}, 1, false},
		{"the machine's choice", []string{"--chunk-bytes", "8192", "--lanes", "0"}, client.AutoLanes(runtime.NumCPU()), ps.AutoParallelStep(runtime.NumCPU())},
		// Pushes and pulls overlapped go alone, one stream each.
		{"pushes overlapped", []string{"--chunk-bytes", "8192", "--lanes", "3", "--overlap-push-pull", "--parallel-step"}, 1, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			res, _ := trainJSON(t, nil, append(common, c.args...)...)
			assert.Equal(t, c.lanes, res.Lanes, "lanes")
			assert.Equal(t, c.par, res.ParallelStep, "parallel step")
		})
	}
}

// TestABatchLargerThanAShareIsReportedAsRun: each worker's loader takes
// no more than its share of an epoch (3,000 of the 6,000 synthetic
// samples for two workers), and the header and --json say the batch that
// ran, not the one asked for.
func TestABatchLargerThanAShareIsReportedAsRun(t *testing.T) {
	res, out := trainJSON(t, nil, "--dataset", "synthetic", "--hidden", "32", "--batch", "100000", "--steps", "2", "--workers", "2")
	assert.Equal(t, 3000, res.Batch)
	assert.Contains(t, out, "batch 3000 per worker (--batch 100000 is more than a worker's share of an epoch: each step takes all of it)")
	assert.Equal(t, int64(2*2*3000), res.Samples, "two steps of 3,000 samples a worker")
}

// TestAFinishedCheckpointSaysSo: the README's train --checkpoint-dir run
// a second time resumes a finished run and trains nothing; it says why and
// what to do, where it printed 0 samples/s without a word.
func TestAFinishedCheckpointSaysSo(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	args := []string{"--dataset", "synthetic", "--hidden", "32", "--steps", "3", "--checkpoint-dir", dir}
	first, out := trainJSON(t, nil, args...)
	require.Positive(t, first.Samples)
	assert.NotContains(t, out, "nothing left to train")
	again, out := trainJSON(t, nil, args...)
	assert.Zero(t, again.Samples)
	assert.Contains(t, out, "nothing left to train: the checkpoints in "+dir+" hold a run that already reached its end (step 3); to train anew, give another --checkpoint-dir or empty "+dir)
}
