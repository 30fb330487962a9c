package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/shoalml/shoal/bench"
	"github.com/shoalml/shoal/gpu"
	"github.com/shoalml/shoal/internal/lockedio"
	"github.com/shoalml/shoal/launch"
	"github.com/shoalml/shoal/nn"
	pb "github.com/shoalml/shoal/proto/shoalpb"
	"github.com/shoalml/shoal/secure"
)

// readmeRun says how TestREADME runs one command line of README.md, and
// what it checks beyond a clean exit. Every line needs one, so whoever adds
// an example decides how it is tested.
//
// In subst, add and env, {dir} is the line's own empty folder (also its
// working folder, so relative paths such as --out bench-out land there),
// {servers} the addresses of the servers started for it, {master} a free
// loopback port for a ring's rendezvous and {bin} the shoal that a make
// line builds.
// repoPath is the absolute path of a file of the repository (tests run
// in the package's folder; a README line runs in a folder of its own).
func repoPath(p string) string {
	abs, err := filepath.Abs(filepath.Join("..", "..", p))
	if err != nil {
		panic(err)
	}
	return abs
}

type readmeRun struct {
	// skip says why the line does not run here.
	skip string
	// dry: a skipped make line is still dry-run (make -n), so a target
	// that is gone fails.
	dry bool
	// needs names a program the line runs that may not be installed ("torch":
	// Debian's python3-torch; "gpu": a GPU that CUDA finds);
	// without it the line is skipped, saying why, or fallback runs.
	needs, needsWhy string
	// fallback makes the line's calls with grpc-go against the server at
	// addr when its program (grpcurl) is missing.
	fallback func(t *testing.T, ctx context.Context, addr string)
	// servers: start this many async `shoal ps` shards on loopback first.
	servers int
	// subst replaces whole words of the line: README placeholders such as
	// host1:7070 become loopback addresses, system paths the line's folder.
	subst map[string]string
	// add is appended to the shoal command line; a later flag overrides an
	// earlier one, so it shortens a run (--steps 5) without hiding the
	// line's own flags. For make lines it is appended to the recipe's
	// lines that run {bin}.
	add []string
	// env is added to the command's environment (the bench scripts'
	// settings: ROUNDS, STEPS, DOC, ...).
	env []string
	// recipe: a make line runs its recipe as make -n prints it, line by
	// line as make would, with add appended to the lines that run {bin}.
	recipe bool
	// serve: the line starts a server; it must print its address, answer
	// the gRPC health check, and exit cleanly on SIGTERM.
	serve bool
	// tls: the line's folder holds shoal certs' files in certs/ before it
	// runs, and a serve line's health check speaks TLS with them.
	tls bool
	// limit is the line's deadline (default 2 minutes).
	limit time.Duration
	// setup puts what the line reads into its folder.
	setup func(t *testing.T, dir string)
	// start starts what the line talks to, beyond plain servers, and
	// returns more {vars} for subst.
	start func(t *testing.T, ctx context.Context, dir string) map[string]string
	// check asserts on what the line printed and wrote.
	check func(t *testing.T, dir, stdout string)
}

// readmeRuns holds, for every command line of README.md, how TestREADME
// runs it. The key is the line as the README has it, without its comment.
var readmeRuns = map[string]readmeRun{
	// Two commands. make run's recipe (build, dataset, train) as make -n
	// prints it, the training five steps rather than three epochs.
	"make run": {recipe: true, add: []string{"--steps", "5"}, check: trainTested},
	"make test": {skip: "it runs every test of the module, this one included; CI runs it as its own step " +
		"(not even dry-run: make -n still runs verify-generate's recipe, which calls $(MAKE), and that diffs proto/ in the checkout)"},

	// shoal train. Five steps each, on Fashion-MNIST; sync, ssp and ring
	// lines keep their worker, server and backup counts.
	"shoal train":                                  {add: []string{"--steps", "5"}, check: trainTested},
	"shoal train --model mlp --epochs 10":          {add: []string{"--steps", "5"}, check: trainTested},
	"shoal train --model cnn --epochs 5 --lr 0.02": {add: []string{"--steps", "5"}, check: trainTested},
	// 200 steps: with --lr 0.02, as this line was, it diverged (a NaN
	// loss) at steps 33 to 74 in every run, past the five it ran.
	"shoal train --hidden 512,512 --workers 4 --servers 2 --batch 32": {add: []string{"--steps", "200"}, check: trainTested},
	"shoal train --steps 500 --save model.safetensors --json": {add: []string{"--steps", "5"}, check: func(t *testing.T, dir, stdout string) {
		sum := lastJSON(t, stdout)
		assert.Equal(t, float64(5), sum["steps"])
		assert.Equal(t, "model.safetensors", sum["saved"])
		l, vec, _, err := nn.LoadSafetensors(filepath.Join(dir, "model.safetensors"))
		require.NoError(t, err)
		assert.Len(t, vec, l.Size())
	}},
	"shoal train --dataset synthetic":                        {add: []string{"--steps", "5"}, check: trainTested},
	"shoal train --mode sync --workers 4 --servers 3":        {add: []string{"--steps", "5"}, check: trainTested},
	"shoal train --mode sync --workers 4 --backup-workers 1": {add: []string{"--steps", "5"}, check: trainTested},
	"shoal train --mode ssp --staleness 2 --workers 4":       {add: []string{"--steps", "5"}, check: trainTested},
	"shoal train --checkpoint-dir ckpt": {add: []string{"--steps", "5"}, check: func(t *testing.T, dir, stdout string) {
		trainTested(t, dir, stdout)
		assertNotEmptyDir(t, filepath.Join(dir, "ckpt"))
	}},
	"shoal train --mode ring --workers 4":                                       {add: []string{"--steps", "5"}, check: trainTested},
	"shoal train --mode ring --workers 3 --reduce-op adasum --compression bf16": {add: []string{"--steps", "5"}, check: trainTested},

	// shoal ps: servers on a free loopback port, not :7070 on every
	// interface.
	"shoal ps --listen :7070":                                   {serve: true, subst: map[string]string{":7070": "127.0.0.1:0"}},
	"shoal ps --listen :7071 --shard 1 --servers 2 --model cnn": {serve: true, subst: map[string]string{":7071": "127.0.0.1:0"}},
	// No --listen: it would serve on :7070, every interface. (Without an
	// update it writes no checkpoint; shoal train --checkpoint-dir does.)
	"shoal ps --mode sync --workers 4 --checkpoint-dir /var/lib/shoal": {serve: true,
		subst: map[string]string{"/var/lib/shoal": "{dir}/shoal"}, add: []string{"--listen", "127.0.0.1:0"}},
	"grpcurl -plaintext localhost:7070 list": {servers: 1, subst: map[string]string{"localhost:7070": "{servers}"},
		needs: "grpcurl", fallback: func(t *testing.T, ctx context.Context, addr string) {
			names := listServices(t, ctx, addr)
			assert.Contains(t, names, "shoal.v1.ParameterServer")
			assert.Contains(t, names, "grpc.health.v1.Health")
		},
		check: func(t *testing.T, _, stdout string) {
			assert.Contains(t, stdout, "shoal.v1.ParameterServer")
			assert.Contains(t, stdout, "grpc.health.v1.Health")
		}},
	"grpcurl -plaintext localhost:7070 grpc.health.v1.Health/Check": {servers: 1, subst: map[string]string{"localhost:7070": "{servers}"},
		needs: "grpcurl", fallback: func(t *testing.T, ctx context.Context, addr string) {
			h, err := healthpb.NewHealthClient(dialT(t, addr)).Check(ctx, &healthpb.HealthCheckRequest{})
			require.NoError(t, err)
			assert.Equal(t, healthpb.HealthCheckResponse_SERVING, h.Status)
		},
		check: func(t *testing.T, _, stdout string) { assert.Contains(t, stdout, "SERVING") }},
	"grpcurl -plaintext localhost:7070 shoal.v1.ParameterServer/Info": {servers: 1, subst: map[string]string{"localhost:7070": "{servers}"},
		needs: "grpcurl", fallback: func(t *testing.T, ctx context.Context, addr string) {
			info, err := pb.NewParameterServerClient(dialT(t, addr)).Info(ctx, &pb.InfoRequest{})
			require.NoError(t, err)
			assert.Equal(t, "async", info.Mode)
			assert.NotEmpty(t, info.Layout)
		},
		check: func(t *testing.T, _, stdout string) { assert.Contains(t, stdout, `"mode": "async"`) }},

	// shoal worker: the servers and the rendezvous it names are started on
	// loopback.
	"shoal worker --servers host1:7070,host2:7070 --rank 0 --world-size 4": {servers: 2,
		subst: map[string]string{"host1:7070,host2:7070": "{servers}"}, add: []string{"--steps", "5"},
		check: func(t *testing.T, _, stdout string) {
			assert.Contains(t, stdout, "worker 0 of 4: 5 steps")
			assert.Contains(t, stdout, "test: loss")
		}},
	// From Horovod to Shoal: the Horovod-style example on two ranks, on
	// the ring and on two sync shards, on a subset of Fashion-MNIST laid
	// out in the line's folder; the library built once by the test.
	"make build libshoal torchvision-data": {dry: true, skip: "the test builds bin/shoal and libshoal.so itself, and lays the data out in each line's folder"},
	"shoal run -np 2 /usr/bin/python3 clients/python/examples/hvd_mnist.py --epochs 1 --data-dir build/torchvision-data":                         horovodExample("ring"),
	"shoal run -np 2 --mode sync --servers 2 /usr/bin/python3 clients/python/examples/hvd_mnist.py --epochs 1 --data-dir build/torchvision-data": horovodExample("sync"),

	"mpirun -np 4 shoal worker --servers ps1:7070": {servers: 1, needs: "mpirun", needsWhy: "Open MPI is Debian's openmpi-bin",
		subst: map[string]string{"ps1:7070": "{servers}"}, add: []string{"--steps", "5"},
		check: func(t *testing.T, _, stdout string) {
			for r := range 4 {
				assert.Contains(t, stdout, fmt.Sprintf("worker %d of 4: 5 steps", r))
			}
		}},
	"srun -n 8 shoal worker --servers ps1:7070": {skip: "Slurm's srun needs a Slurm cluster (slurmctld and an allocation); there is none here"},
	"mpirun -np 4 shoal worker --mode ring --master node1:29500": {needs: "mpirun", needsWhy: "Open MPI is Debian's openmpi-bin",
		subst: map[string]string{"node1:29500": "{master}"}, add: []string{"--steps", "5"},
		check: func(t *testing.T, _, stdout string) {
			for r := range 4 {
				assert.Contains(t, stdout, fmt.Sprintf("rank %d of 4: 5 steps", r))
			}
		}},

	// Watching a run: five steps with every child's metrics and timeline;
	// a shard with its endpoint on a free port (the serve check scrapes
	// nothing, TestEveryChildServesItsMetrics does).
	"shoal train --mode sync --workers 2 --servers 2 --metrics --timeline /tmp/shoal-timeline": {add: []string{"--steps", "5"}, subst: map[string]string{"/tmp/shoal-timeline": "timeline"}, check: func(t *testing.T, dir, stdout string) {
		trainTested(t, dir, stdout)
		for _, child := range []string{"ps 0", "ps 1", "worker 0", "worker 1"} {
			assert.Contains(t, stdout, "metrics: "+child+" at http://127.0.0.1:")
		}
		assert.FileExists(t, filepath.Join(dir, "timeline", "timeline.json"))
	}},
	"shoal ps --listen :7070 --metrics-addr 127.0.0.1:9100 --stall-warning 1m": {serve: true,
		subst: map[string]string{":7070": "127.0.0.1:0", "127.0.0.1:9100": "127.0.0.1:0"}},

	// shoal bench plan: simulated; the big model's line measures its
	// compute first.
	"shoal bench plan --workers 1024 --nic-gbps 25": {check: func(t *testing.T, _, stdout string) {
		assert.Contains(t, stdout, "1024 workers of batch 64, NICs of 25 Gbit/s")
		assert.Contains(t, stdout, "fastest: ")
	}},
	"shoal bench plan --workers 64 --nic-gbps 25 --hidden 16384,768 --batch 16": {check: func(t *testing.T, _, stdout string) {
		assert.Contains(t, stdout, "mlp 784-16384-768-10 (101.8 MB), 64 workers of batch 16")
		assert.Contains(t, stdout, "fastest: ")
	}},

	"shoal bench plan --layers sim/models/vgg16.txt --workers 512 --modes ring --nic-gbps 25 --latency 5us --compute 415.6ms --apply-gbps 100 --fusion-bytes 67108864 --steps 5 --jitter 0": {
		subst: map[string]string{"sim/models/vgg16.txt": repoPath("sim/models/vgg16.txt")}, check: func(t *testing.T, _, stdout string) {
			assert.Contains(t, stdout, "vgg16 (553.4 MB), 512 workers of batch 64")
			assert.Contains(t, stdout, "ring         -")
		}},
	"shoal bench plan --workers 64 --nic-gbps 25 --target 0.75": {add: []string{"--epochs", "1"}, check: func(t *testing.T, _, stdout string) {
		assert.Contains(t, stdout, "time to 75.0% test accuracy on fashion-mnist/test")
		assert.Contains(t, stdout, "first to 75.0%: ")
	}},
	// shoal bench simulate: the quick plan, predicted (compute measured
	// here); make bench-simulate against the committed measurements, into
	// a copy of the document.
	"shoal bench simulate --quick --out bench-sim": {check: func(t *testing.T, dir, stdout string) {
		assert.Contains(t, stdout, "mlp/sync/w2/s1/nic1: ")
		res, err := bench.Load(filepath.Join(dir, "bench-sim", "results.json"))
		require.NoError(t, err)
		assert.True(t, res.Simulated)
		assert.FileExists(t, filepath.Join(dir, "bench-sim", "report.md"))
	}},
	"make bench-simulate": {env: []string{"SHOAL={bin}", "DOC={dir}/BENCHMARKS.md", "OUT={dir}/bench-simulate", "MEASURED=" + repoPath("docs/bench-train/results.json")},
		needs: "python3", needsWhy: "the script renders its table with python3",
		setup: copyBenchmarksDoc, check: benchmarksDocHas("Command: `make bench-simulate`")},
	// shoal bench emulate: one worker count and one epoch of the README's
	// matrix (the whole takes a minute; TestTheEmulatorMatchesRealRuns
	// checks the emulator).
	"shoal bench emulate --workers 8,16,32,64 --modes async,ssp,sync --staleness 1,4,16 --jitter 0.5 --out emulated": {
		add: []string{"--workers", "8", "--epochs", "1", "--staleness", "4"}, check: func(t *testing.T, dir, stdout string) {
			for _, row := range []string{"async        staleness N=8", "ssp    s=4   average   N=8", "sync                   N=8"} {
				assert.Contains(t, stdout, row)
			}
			assert.FileExists(t, filepath.Join(dir, "emulated", "accuracy-n8.png"))
		}},

	// A recorded run and its replay: the replay's folder holds the
	// recording of the same job, made by setup, whose test accuracy the
	// replay must give.
	"shoal train --mode async --workers 4 --epochs 1 --record-pushes run1": {check: func(t *testing.T, dir, stdout string) {
		trainTested(t, dir, stdout)
		for r := range 4 {
			assert.FileExists(t, filepath.Join(dir, "run1", fmt.Sprintf("worker-%d.pushes.json", r)))
		}
	}},
	"shoal bench emulate --replay run1 --epochs 1": {limit: 4 * time.Minute, setup: func(t *testing.T, dir string) {
		ctx := ctxT(t, 3*time.Minute)
		out, err := exec.CommandContext(ctx, shoalBin, "train", "--mode", "async", "--workers", "4", "--epochs", "1", "--threads", "1",
			"--record-pushes", filepath.Join(dir, "run1"), "--json").Output()
		require.NoError(t, err, "%s", out)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "real.json"), out, 0o644))
	}, check: func(t *testing.T, dir, stdout string) {
		real, err := os.ReadFile(filepath.Join(dir, "real.json"))
		require.NoError(t, err)
		acc := lastJSON(t, string(real))["test_accuracy"].(float64)
		assert.Contains(t, stdout, fmt.Sprintf("test accuracy %6.2f%%", 100*acc), "the replay gives the recorded run's accuracy")
	}},

	// Python: the job TestPythonWorker runs (the four processes at once,
	// which this test's one-line-after-another cannot).
	"shoal ps --listen 127.0.0.1:7070 --servers 2 --shard 0 --workers 2 --mode sync":                                                    {skip: pythonJob},
	"shoal ps --listen 127.0.0.1:7071 --servers 2 --shard 1 --workers 2 --mode sync":                                                    {skip: pythonJob},
	"shoal worker --servers 127.0.0.1:7070,127.0.0.1:7071 --mode sync --rank 0 --world-size 2 --steps 300":                              {skip: pythonJob},
	"/usr/bin/python3 clients/python/examples/train_mlp.py --servers 127.0.0.1:7070,127.0.0.1:7071 --rank 1 --world-size 2 --steps 300": {skip: pythonJob},

	// Security: the certificates in the line's folder; the shard a worker
	// line talks to serves with them on loopback.
	"shoal certs --out certs --hosts ps0,ps1": {check: func(t *testing.T, dir, stdout string) {
		for _, f := range []string{"ca.pem", "node.pem", "node-key.pem", "token"} {
			assert.FileExists(t, filepath.Join(dir, "certs", f))
		}
		assert.Contains(t, stdout, "--tls-cert certs/node.pem --tls-key certs/node-key.pem --tls-ca certs/ca.pem --auth-token-file certs/token")
	}},
	"shoal ps --listen :7070 --tls-cert certs/node.pem --tls-key certs/node-key.pem --tls-ca certs/ca.pem --auth-token-file certs/token": {serve: true, tls: true,
		subst: map[string]string{":7070": "127.0.0.1:0"}},
	"shoal worker --servers ps0:7070 --tls-cert certs/node.pem --tls-key certs/node-key.pem --tls-ca certs/ca.pem --auth-token-file certs/token": {tls: true,
		subst: map[string]string{"ps0:7070": "{servers}"}, add: []string{"--steps", "5"},
		start: func(t *testing.T, ctx context.Context, dir string) map[string]string {
			ps := startProc(t, append([]string{"ps", "--listen", "127.0.0.1:0", "--events"}, certFlags(dir)...)...)
			return map[string]string{"{servers}": ps.next(t, ctx, "listening event", func(e launch.Event) bool { return e.Event == "listening" }).Addr}
		},
		check: func(t *testing.T, _, stdout string) { assert.Contains(t, stdout, "worker 0 of 1: 5 steps") }},
	"shoal train --tls": {add: []string{"--steps", "5"}, check: trainTested},

	// Membership by hand: loopback addresses for ps1 and the gossip
	// port, a key in the line's folder. A worker line gets a sync shard
	// that gossips with that key, and the other worker of the two.
	"shoal ps --listen :7070 --mode sync --workers 2 --gossip-addr :7946 --gossip-key-file gossip.key": {serve: true, setup: writeGossipKey,
		subst: map[string]string{":7070": "127.0.0.1:0", ":7946": "127.0.0.1:0", "gossip.key": "{dir}/gossip.key"}},
	"shoal worker --servers ps1:7070 --mode sync --rank 0 --world-size 2 --join ps1:7946 --gossip-key-file gossip.key": gossipWorker(0),
	"shoal worker --servers ps1:7070 --mode sync --rank 1 --world-size 2 --join ps1:7946 --gossip-key-file gossip.key": gossipWorker(1),
	// The elastic ring by hand: the other rank is started on a free
	// loopback gossip port (rank 0's line gossips there; rank 1's joins it).
	"shoal worker --mode ring --rank 0 --world-size 2 --gossip-addr :7946 --gossip-key-file gossip.key": elasticRank(0),
	"shoal worker --mode ring --rank 1 --world-size 2 --join node1:7946 --gossip-key-file gossip.key":   elasticRank(1),

	// The cluster: internal/composetest runs these files with
	// docker-compose (a project of its own, fewer epochs, faults
	// injected); make test runs it as make test-cluster.
	"make images":            {dry: true, skip: "internal/composetest builds the image with scripts/image.sh, as make test-cluster"},
	"docker-compose up":      {skip: "internal/composetest runs docker-compose.yml up, as make test-cluster"},
	"docker-compose down -v": {skip: "internal/composetest runs it after each of its clusters"},
	"docker-compose -f docker-compose.ring.yml down -v": {skip: "internal/composetest runs it after each of its clusters"},
	"docker-compose -f docker-compose.ring.yml up":      {skip: "internal/composetest runs docker-compose.ring.yml up, as make test-cluster"},

	// shoal bench allreduce: the optional [flags] are given; small sizes.
	"shoal bench allreduce --np 4 --sizes 1MiB,4MiB,16MiB,64MiB --iters 20 [--json] [--op allgather]": {
		add: []string{"--sizes", "64KiB,1MiB", "--iters", "2", "--warmup", "1"},
		check: func(t *testing.T, _, stdout string) {
			var n int
			for l := range strings.Lines(stdout) {
				var r launch.CollRecord
				require.NoError(t, json.Unmarshal([]byte(l), &r), l)
				assert.Equal(t, "allgather", r.Op)
				assert.True(t, r.Correct, l)
				n++
			}
			assert.Equal(t, 2, n, "one record per size")
		}},
	"make bench-allreduce": {dry: true, skip: "it writes docs/BENCHMARKS.md in the checkout: scripts/bench-allreduce.sh has no DOC setting"},

	// shoal bench train. --quick is the plan as it is, on synthetic data:
	// the data is not what it shows, and loading Fashion-MNIST in each of
	// its 15 runs' processes would double its time.
	"shoal bench train --quick --out bench-out": {add: []string{"--dataset", "synthetic"}, limit: 4 * time.Minute,
		check: func(t *testing.T, dir, _ string) { benchOutputTested(t, filepath.Join(dir, "bench-out"), 15) }},
	"make bench": {dry: true, skip: "the built-in plan takes about twelve minutes; `shoal bench train --quick` above runs the same harness"},
	// The grid keeps its modes, worker and server counts (8 runs) but not
	// the 25M-parameter model, on synthetic data, 2 steps, and without the
	// NIC model: its self-check at 10 Gbit/s is refused on a loaded
	// machine, and --quick checks the NIC model already.
	"shoal bench train --models mlp,big --modes sync,ring --workers 2,4 --servers 1,2,4 --steps 10 --nic-gbps 10": {
		add:   []string{"--models", "mlp", "--steps", "2", "--dataset", "synthetic", "--nic-gbps", "0"},
		check: func(t *testing.T, dir, _ string) { benchOutputTested(t, filepath.Join(dir, "bench-out"), 8) }},
	"shoal bench diff before/results.json after/results.json": {
		setup: func(t *testing.T, dir string) {
			copyFile(t, "../../bench/testdata/results.json", filepath.Join(dir, "before", "results.json"))
			copyFile(t, "../../bench/testdata/results.json", filepath.Join(dir, "after", "results.json"))
		},
		check: func(t *testing.T, _, stdout string) { assert.NotEmpty(t, stdout) }},
	"shoal bench report bench-out/results.json": {
		setup: func(t *testing.T, dir string) {
			copyFile(t, "../../bench/testdata/results.json", filepath.Join(dir, "bench-out", "results.json"))
		},
		check: func(t *testing.T, dir, _ string) { assert.FileExists(t, filepath.Join(dir, "bench-out", "report.md")) }},
	// One round of 2 steps per setting, into a copy of the document.
	"make bench-fusion": {env: []string{"SHOAL={bin}", "ROUNDS=1", "STEPS=2", "DOC={dir}/BENCHMARKS.md"}, needs: "python3",
		needsWhy: "the script renders its table with python3",
		setup:    copyBenchmarksDoc, check: benchmarksDocHas("Command: `scripts/bench-fusion.sh` (ROUNDS=1 STEPS=2)")},

	// shoal bench compute.
	"shoal bench compute --model mlp --hidden 512,512 --batch 64 --threads 1 [--json]": {add: []string{"--steps", "5", "--warmup", "1"},
		check: func(t *testing.T, _, stdout string) {
			r := lastJSON(t, stdout)
			assert.Equal(t, float64(64), r["batch"])
			assert.Positive(t, r["samples_per_sec"])
		}},
	"make bench-compute": {needs: "torch", needsWhy: "the script compares with PyTorch: Debian's python3-torch",
		env:   []string{"SHOAL={bin}", "ROUNDS=1", "STEPS=5", "WARMUP=1", "DOC={dir}/BENCHMARKS.md"},
		setup: copyBenchmarksDoc, check: benchmarksDocHas("`make bench-compute (DEVICE=cpu MODELS=\"mlp cnn\" BATCHES=\"64\" THREADS=1 STEPS=5 WARMUP=1 ROUNDS=1)`")},
	"make gpubin":        {skip: "builds two stripped binaries for a GPU machine (a minute of compiling)", dry: true},
	"make gpu-check-emu": {skip: "builds the binaries of make gpubin and the emulator, then runs scripts/gpu-check.sh on it (minutes)", dry: true},
	// The GPU lines: where CUDA finds a GPU they run (a few steps), else
	// they are skipped saying so (TestDeviceCUDAWithoutAGPU checks the
	// error they give there).
	"shoal train --device cuda --model mlp --epochs 3": {needs: "gpu", needsWhy: "--device cuda needs a CUDA GPU",
		add: []string{"--steps", "20"}, check: trainTested},
	"shoal train --device cuda --workers 4 --mode ring": {needs: "gpu", needsWhy: "--device cuda needs a CUDA GPU",
		add: []string{"--steps", "20", "--dataset", "synthetic"}, check: trainTested},
	"shoal train --device cuda --precision bf16 --model cnn": {needs: "gpu", needsWhy: "--device cuda needs a CUDA GPU",
		add: []string{"--steps", "20"}, check: func(t *testing.T, dir, stdout string) {
			trainTested(t, dir, stdout)
			assert.Regexp(t, `worker\(s\) on cuda:\d+ in bf16,`, stdout)
		}},
	"shoal bench compute --device cuda --hidden 512,512 --batch 1024 [--json]": {needs: "gpu", needsWhy: "--device cuda needs a CUDA GPU",
		add: []string{"--steps", "5", "--warmup", "1"}, check: func(t *testing.T, _, stdout string) {
			r := lastJSON(t, stdout)
			assert.Contains(t, r["backend"], "cuda:")
		}},
	"shoal bench compute --device cuda --hidden 512,512 --sweep mlp:64,256,1024,4096 --precisions fp32,bf16 --rounds 3 --json": {
		needs: "gpu", needsWhy: "--device cuda needs a CUDA GPU",
		add: []string{"--steps", "2", "--warmup", "1"}, check: func(t *testing.T, _, stdout string) {
			lines := strings.Split(strings.TrimSpace(stdout), "\n")
			assert.Len(t, lines, 24, "4 batches in 2 precisions, 3 rounds")
			assert.Contains(t, lastJSON(t, stdout)["backend"], "cuda:")
		}},
	"make bench-ps": {needs: "torch", needsWhy: "the script compares with PyTorch RPC: Debian's python3-torch",
		env: []string{"SHOAL={bin}", "BENCH_PS_ROUNDS=1", "BENCH_PS_STEPS=5", "BENCH_PS_TCP_ITERS=2", "DOC={dir}/BENCHMARKS.md"},
		// Five setups, three of them PyTorch RPC processes: 133 s on 2
		// cores at load 13 (the default 2 minutes ended it).
		limit: 4 * time.Minute,
		setup: copyBenchmarksDoc, check: benchmarksDocHas("`make bench-ps (BENCH_PS_ROUNDS=1 ")},

	// shoal bench tcp: the optional [flags] are given; fewer round trips.
	"shoal bench tcp --bytes 2678824 [--iters 50] [--warmup 5] [--json]": {add: []string{"--iters", "3", "--warmup", "1"},
		check: func(t *testing.T, _, stdout string) {
			r := lastJSON(t, stdout)
			assert.Equal(t, float64(2678824), r["bytes"])
			assert.Positive(t, r["median_seconds"])
		}},

	// The headings that are whole commands.
	"shoal info":    {check: func(t *testing.T, _, stdout string) { assert.Contains(t, stdout, "gemm:") }},
	"shoal version": {check: func(t *testing.T, _, stdout string) { assert.Regexp(t, `^shoal \S+ revision \S+`, stdout) }},
}

// pythonJob says where the Python section's job runs.
const pythonJob = "TestPythonWorker (cmd/shoal/python_test.go) runs this job: two sync shards, a Go worker and train_mlp.py, at once"

// TestREADME runs every command line of README.md as readmeRuns says, one
// after the other (the machine may have two cores), each within its own
// deadline.
func TestREADME(t *testing.T) {
	lines := readmeLines(t, "../../README.md")
	require.NotEmpty(t, lines)
	seen := map[string]bool{}
	for _, l := range lines {
		seen[l.text] = true
		if _, ok := readmeRuns[l.text]; !ok {
			t.Errorf("README.md:%d: %q has no entry in readmeRuns: say there how the test runs it", l.line, l.text)
		}
	}
	for k := range readmeRuns {
		if !seen[k] {
			t.Errorf("readmeRuns has %q, which README.md no longer has", k)
		}
	}
	for _, l := range lines {
		rr, ok := readmeRuns[l.text]
		if !ok {
			continue
		}
		t.Run(l.text, func(t *testing.T) { runReadmeLine(t, l, rr) })
	}
}

// readmeLine is one command line of the README.
type readmeLine struct {
	text string // the command, without its comment, spaces made single
	line int    // its line number in the file
}

// wholeCommand is a heading that is a command and nothing else.
var wholeCommand = regexp.MustCompile(`^#+ +(shoal(?: [a-z][a-z0-9-]*)*) *$`)

// readmeLines returns the lines of the README's shell code blocks and its
// headings that are whole commands, in order; a command given twice is
// returned once.
func readmeLines(t *testing.T, path string) []readmeLine {
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var out []readmeLine
	seen := map[string]bool{}
	add := func(text string, n int) {
		text = strings.Join(strings.Fields(text), " ")
		if text != "" && !seen[text] {
			seen[text] = true
			out = append(out, readmeLine{text: text, line: n})
		}
	}
	sc := bufio.NewScanner(f)
	inBlock, shell := false, false
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		if fence, ok := strings.CutPrefix(strings.TrimSpace(l), "```"); ok {
			if !inBlock {
				shell = slices.Contains([]string{"", "sh", "bash", "shell", "console"}, strings.TrimSpace(fence))
			}
			inBlock = !inBlock
			continue
		}
		switch {
		case inBlock && shell:
			if i := strings.Index(l, " #"); i >= 0 {
				l = l[:i]
			}
			if !strings.HasPrefix(strings.TrimSpace(l), "#") {
				add(l, n)
			}
		case !inBlock:
			if m := wholeCommand.FindStringSubmatch(l); m != nil {
				add(m[1], n)
			}
		}
	}
	require.NoError(t, sc.Err())
	require.False(t, inBlock, "%s: a code block is not closed", path)
	return out
}

// runReadmeLine runs one README line as rr says.
func runReadmeLine(t *testing.T, l readmeLine, rr readmeRun) {
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	dir := t.TempDir()
	words := strings.Fields(l.text)
	if strings.ContainsAny(l.text, `"'$;|&<>()`) {
		t.Fatalf("README.md:%d: %q needs a shell; the test splits lines on spaces only", l.line, l.text)
	}
	vars := map[string]string{"{dir}": dir, "{bin}": filepath.Join(dir, "shoal")}
	if rr.skip != "" {
		if rr.dry {
			require.Equal(t, "make", words[0], "only make lines are dry-run")
			ctx := ctxT(t, time.Minute)
			cmd := exec.CommandContext(ctx, "make", append([]string{"-n"}, append(words[1:], "BIN="+vars["{bin}"])...)...)
			cmd.Dir, cmd.Env = root, makeEnv()
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "make -n: %s", out)
		}
		t.Skipf("README.md:%d: not run: %s", l.line, rr.skip)
	}
	missing := rr.needs != "" && !installed(rr.needs)
	if missing && rr.fallback == nil {
		what := rr.needs + " is not installed"
		if rr.needs == "gpu" {
			what = "CUDA finds no GPU here"
		}
		t.Skipf("README.md:%d: not run: %s (%s)", l.line, what, rr.needsWhy)
	}
	limit := rr.limit
	if limit == 0 {
		limit = 2 * time.Minute
	}
	ctx := ctxT(t, limit)
	var creds *secure.Credentials
	if rr.tls {
		creds = writeCerts(t, dir)
	}
	if rr.setup != nil {
		rr.setup(t, dir)
	}
	if rr.servers > 0 {
		var addrs []string
		for i := range rr.servers {
			ps := startProc(t, "ps", "--listen", "127.0.0.1:0", "--events", "--shard", fmt.Sprint(i), "--servers", fmt.Sprint(rr.servers))
			addrs = append(addrs, ps.next(t, ctx, "listening event", func(e launch.Event) bool { return e.Event == "listening" }).Addr)
		}
		vars["{servers}"] = strings.Join(addrs, ",")
	}
	vars["{master}"] = freeLoopbackAddr(t)
	if rr.start != nil {
		maps.Copy(vars, rr.start(t, ctx, dir))
	}
	expand := func(s string) string {
		for k, v := range vars {
			s = strings.ReplaceAll(s, k, v)
		}
		return s
	}
	for from, to := range rr.subst {
		i := slices.Index(words, from)
		require.GreaterOrEqual(t, i, 0, "readmeRuns[%q].subst: the line has no word %q", l.text, from)
		words[i] = expand(to)
	}
	for i, w := range words { // [--optional flags] are given
		words[i] = strings.TrimSuffix(strings.TrimPrefix(w, "["), "]")
	}
	var add, env []string
	for _, a := range rr.add {
		add = append(add, expand(a))
	}
	for _, e := range rr.env {
		env = append(env, expand(e))
	}
	if missing {
		t.Logf("%s is not installed: the same calls through grpc-go", rr.needs)
		rr.fallback(t, ctx, vars["{servers}"])
		return
	}

	var cmd *exec.Cmd
	switch words[0] {
	case "shoal":
		cmd = exec.CommandContext(ctx, shoalBin, append(words[1:], add...)...)
	case "mpirun":
		i := slices.Index(words, "shoal")
		require.Positive(t, i, "an mpirun line runs shoal")
		// Four ranks on a machine with fewer cores; mpirun refuses root
		// without being told.
		opts := []string{"--oversubscribe"}
		if os.Geteuid() == 0 {
			opts = append(opts, "--allow-run-as-root")
		}
		args := append(append(opts, words[1:i]...), shoalBin)
		cmd = exec.CommandContext(ctx, "mpirun", append(append(args, words[i+1:]...), add...)...)
	case "grpcurl":
		cmd = exec.CommandContext(ctx, "grpcurl", words[1:]...)
	case "make":
		mk := append(words[1:], "BIN="+vars["{bin}"])
		if rr.recipe {
			runRecipe(t, ctx, root, dir, vars["{bin}"], mk, add, env, rr.check)
			return
		}
		cmd = exec.CommandContext(ctx, "make", mk...)
		cmd.Dir, cmd.Env = root, append(makeEnv(), env...)
	default:
		t.Fatalf("README.md:%d: %q runs %s, which the test does not know how to run", l.line, l.text, words[0])
	}
	if cmd.Dir == "" {
		cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
	}
	// On the deadline: SIGTERM first, so a launcher stops its children.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	var stdout string
	if rr.serve {
		stdout = serveAndStop(t, ctx, cmd, creds)
	} else {
		stderr := lockedio.NewBuffer()
		cmd.Stderr = stderr
		out, err := cmd.Output()
		stdout = string(out)
		require.NoError(t, err, "%s\nstdout:\n%s\nstderr:\n%s", cmd, out, stderr.String())
	}
	if rr.check != nil {
		rr.check(t, dir, stdout)
	}
}

// runRecipe runs what `make target` would, as make -n prints it, each line
// in its own shell as make does, with add appended to the lines that run
// bin.
func runRecipe(t *testing.T, ctx context.Context, root, dir, bin string, mk, add, env []string, check func(t *testing.T, dir, stdout string)) {
	cmd := exec.CommandContext(ctx, "make", append([]string{"-n"}, mk...)...)
	cmd.Dir, cmd.Env = root, makeEnv()
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "make -n: %s", out)
	text := strings.ReplaceAll(string(out), "\\\n", "")
	var stdout strings.Builder
	ran := false
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if strings.HasPrefix(line, bin+" ") {
			line += " " + strings.Join(add, " ")
			ran = true
		}
		sh := exec.CommandContext(ctx, "sh", "-c", line)
		sh.Dir, sh.Env = root, append(makeEnv(), env...)
		sh.Cancel = func() error { return sh.Process.Signal(syscall.SIGTERM) }
		sh.WaitDelay = 10 * time.Second
		stderr := lockedio.NewBuffer()
		sh.Stderr = stderr
		out, err := sh.Output()
		require.NoError(t, err, "%s\nstdout:\n%s\nstderr:\n%s", line, out, stderr.String())
		stdout.Write(out)
	}
	require.True(t, ran, "make -n %s runs no %s:\n%s", strings.Join(mk, " "), bin, text)
	if check != nil {
		check(t, dir, stdout.String())
	}
}

// serveAndStop starts a server, waits for its line "... serving ... on
// ADDR, ...", checks that ADDR answers the gRPC health check, stops it with
// SIGTERM and requires a clean exit. It returns what the server printed.
func serveAndStop(t *testing.T, ctx context.Context, cmd *exec.Cmd, creds *secure.Credentials) string {
	stderr := lockedio.NewBuffer()
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	exited := false
	defer func() {
		if !exited {
			_ = cmd.Process.Kill()
			for range lines {
			}
			_ = cmd.Wait()
		}
	}()
	var printed strings.Builder
	ready := regexp.MustCompile(`serving .* on ([^\s,]+:\d+)`)
	var addr string
	for addr == "" {
		select {
		case l, ok := <-lines:
			require.True(t, ok, "%s exited before it was serving; stderr:\n%s", cmd, stderr)
			printed.WriteString(l + "\n")
			if m := ready.FindStringSubmatch(l); m != nil {
				addr = m[1]
			}
		case <-ctx.Done():
			t.Fatalf("%s printed no address before the deadline; stderr:\n%s", cmd, stderr)
		}
	}
	assertServing(t, ctx, addr, creds.DialOptions()...)

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	for l := range lines {
		printed.WriteString(l + "\n")
	}
	exited = true
	require.NoError(t, cmd.Wait(), "%s on SIGTERM; stderr:\n%s", cmd, stderr)
	return printed.String()
}

// trainTested checks that shoal train reported its test metrics.
func trainTested(t *testing.T, _, stdout string) {
	assert.Contains(t, stdout, "test: loss")
}

// benchOutputTested checks a shoal bench train folder: results that
// validate, runs of them without an error, and the report.
func benchOutputTested(t *testing.T, out string, runs int) {
	res, err := bench.Load(filepath.Join(out, "results.json"))
	require.NoError(t, err)
	assert.Len(t, res.Runs, runs)
	for _, r := range res.Runs {
		assert.Empty(t, r.Error, r.ID)
	}
	assert.FileExists(t, filepath.Join(out, "report.md"))
}

// lastJSON decodes the last line of out as a JSON object.
func lastJSON(t *testing.T, out string) map[string]any {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &m), "last line of:\n%s", out)
	return m
}

func assertNotEmptyDir(t *testing.T, dir string) {
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.NotEmpty(t, entries, "%s is empty", dir)
}

// copyBenchmarksDoc puts a copy of docs/BENCHMARKS.md into dir, for a
// bench script to write its table into (DOC), not into the checkout.
func copyBenchmarksDoc(t *testing.T, dir string) {
	copyFile(t, "../../docs/BENCHMARKS.md", filepath.Join(dir, "BENCHMARKS.md"))
}

// benchmarksDocHas checks that a bench script wrote its table into the
// copy: the table's line naming its command.
func benchmarksDocHas(want string) func(t *testing.T, dir, stdout string) {
	return func(t *testing.T, dir, _ string) {
		doc, err := os.ReadFile(filepath.Join(dir, "BENCHMARKS.md"))
		require.NoError(t, err)
		assert.Contains(t, string(doc), want)
	}
}

func copyFile(t *testing.T, from, to string) {
	b, err := os.ReadFile(from)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Dir(to), 0o755))
	require.NoError(t, os.WriteFile(to, b, 0o644))
}

// installed reports whether what a line needs is here: a program on the
// PATH, or "torch", PyTorch in the Python the bench scripts use.
func installed(what string) bool {
	if what == "gpu" {
		n, err := gpu.Count()
		return err == nil && n > 0
	}
	if what == "torch" {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		return exec.CommandContext(ctx, "/usr/bin/python3", "-c", "import torch").Run() == nil
	}
	_, err := exec.LookPath(what)
	return err == nil
}

// makeEnv is the environment of a make the test starts: not that of a make
// that may have started the test (its jobserver is not ours).
func makeEnv() []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return k == "MAKEFLAGS" || k == "MFLAGS" || k == "MAKELEVEL"
	})
}

// freeLoopbackAddr returns a loopback address whose port was free a moment
// ago, for a process that must be told its port in advance.
func freeLoopbackAddr(t *testing.T) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := lis.Addr().String()
	require.NoError(t, lis.Close())
	return addr
}

func dialT(t *testing.T, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return conn
}

// assertServing checks that the gRPC server at addr answers its health
// check with SERVING.
func assertServing(t *testing.T, ctx context.Context, addr string, opts ...grpc.DialOption) {
	t.Helper()
	h, err := healthpb.NewHealthClient(dialT(t, addr, opts...)).Check(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	assert.Equal(t, healthpb.HealthCheckResponse_SERVING, h.Status)
}

// listServices asks the server's reflection service for its services, as
// grpcurl list does.
func listServices(t *testing.T, ctx context.Context, addr string) []string {
	stream, err := reflectionpb.NewServerReflectionClient(dialT(t, addr)).ServerReflectionInfo(ctx)
	require.NoError(t, err)
	require.NoError(t, stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}))
	resp, err := stream.Recv()
	require.NoError(t, err)
	require.NoError(t, stream.CloseSend())
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		require.NoError(t, err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	return names
}

// writeCerts writes what shoal certs writes into dir/certs and loads it.
func writeCerts(t *testing.T, dir string) *secure.Credentials {
	f, err := secure.WriteTestPKI(filepath.Join(dir, "certs"), nil, time.Hour)
	require.NoError(t, err)
	c, err := secure.Load(f)
	require.NoError(t, err)
	return c
}

// certFlags are the four flags of the credentials writeCerts wrote.
func certFlags(dir string) []string {
	d := filepath.Join(dir, "certs")
	return []string{"--tls-cert", filepath.Join(d, "node.pem"), "--tls-key", filepath.Join(d, "node-key.pem"),
		"--tls-ca", filepath.Join(d, "ca.pem"), "--auth-token-file", filepath.Join(d, "token")}
}

func writeGossipKey(t *testing.T, dir string) {
	require.NoError(t, os.WriteFile(filepath.Join(dir, "gossip.key"), []byte("0123456789abcdef0123456789abcdef"), 0o600))
}

// gossipWorker runs the README's worker line of rank: a sync shard for two
// workers gossiping with the key, and the other worker, run first.
func gossipWorker(rank int) readmeRun {
	return readmeRun{setup: writeGossipKey, add: []string{"--steps", "5"},
		subst: map[string]string{"ps1:7070": "{servers}", "ps1:7946": "{gossip}", "gossip.key": "{dir}/gossip.key"},
		start: func(t *testing.T, ctx context.Context, dir string) map[string]string {
			key := filepath.Join(dir, "gossip.key")
			ps := startProc(t, "ps", "--listen", "127.0.0.1:0", "--events", "--mode", "sync", "--workers", "2",
				"--gossip-addr", "127.0.0.1:0", "--gossip-key-file", key)
			up := ps.next(t, ctx, "listening event", func(e launch.Event) bool { return e.Event == launch.Listening })
			startProc(t, "worker", "--servers", up.Addr, "--mode", "sync", "--rank", fmt.Sprint(1-rank), "--world-size", "2",
				"--join", up.Gossip, "--gossip-key-file", key, "--steps", "5", "--eval=false")
			return map[string]string{"{servers}": up.Addr, "{gossip}": up.Gossip}
		},
		check: func(t *testing.T, _, stdout string) {
			assert.Contains(t, stdout, fmt.Sprintf("worker %d of 2: 5 steps", rank))
		}}
}

// elasticRank runs the README's elastic ring line of rank, with the other
// rank of the two started first: rank 0 gossips on a free loopback
// address that rank 1 joins.
func elasticRank(rank int) readmeRun {
	addr := map[int]string{0: ":7946", 1: "node1:7946"}[rank]
	return readmeRun{setup: writeGossipKey, add: []string{"--steps", "5"},
		subst: map[string]string{addr: "{gossip}", "gossip.key": "{dir}/gossip.key"},
		start: func(t *testing.T, ctx context.Context, dir string) map[string]string {
			gossip := freeLoopbackAddr(t)
			flag := "--join"
			if rank == 1 {
				flag = "--gossip-addr"
			}
			startProc(t, "worker", "--mode", "ring", "--rank", fmt.Sprint(1-rank), "--world-size", "2", flag, gossip,
				"--gossip-key-file", filepath.Join(dir, "gossip.key"), "--steps", "5")
			return map[string]string{"{gossip}": gossip}
		},
		check: func(t *testing.T, _, stdout string) {
			assert.Contains(t, stdout, fmt.Sprintf("rank %d of 2: 5 steps", rank))
			if rank == 0 {
				assert.Contains(t, stdout, "test: loss", "the ranks evaluate together; rank 0 prints it")
			}
		}}
}

// horovodExample runs README's shoal run line of the Horovod-style example
// in mode on a subset, and checks that rank 0 printed its test accuracy.
func horovodExample(mode string) readmeRun {
	return readmeRun{needs: "torch", needsWhy: "the example is a PyTorch script: Debian's python3-torch and python3-torchvision", limit: 5 * time.Minute,
		add:   []string{"--train-limit", "2000", "--test-limit", "500"},
		subst: map[string]string{"clients/python/examples/hvd_mnist.py": repoPath("clients/python/examples/hvd_mnist.py"), "build/torchvision-data": "{dir}/tv"},
		setup: func(t *testing.T, dir string) {
			out, err := exec.Command(repoPath("scripts/torchvision-data.sh"), fashionDir, filepath.Join(dir, "tv")).CombinedOutput()
			require.NoError(t, err, "%s", out)
		},
		env: []string{"PYTHONPATH=" + repoPath("clients/python"), "SHOAL_LIBRARY={lib}", "OMP_NUM_THREADS=1", "SHOAL_COLLECTIVE_TIMEOUT=120"},
		start: func(t *testing.T, _ context.Context, _ string) map[string]string {
			return map[string]string{"{lib}": libshoal(t)}
		},
		check: func(t *testing.T, _, stdout string) {
			assert.Contains(t, stdout, "[0]<stdout>:epoch 1: test loss", "mode %s", mode)
		}}
}
