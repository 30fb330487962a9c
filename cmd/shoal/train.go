package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/shoalml/shoal/bench"
	"github.com/shoalml/shoal/client"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/worker"
)

// trainSummary is the --json line of shoal train.
type trainSummary struct {
	Mode          string          `json:"mode"`
	Model         string          `json:"model"`
	Parameters    int             `json:"parameters"`
	Dataset       string          `json:"dataset"`
	Workers       int             `json:"workers"`
	Servers       int             `json:"servers"`
	Epochs        int             `json:"epochs"`
	Steps         int64           `json:"steps"`
	Batch         int             `json:"batch"`
	Optimizer     string          `json:"optimizer"`
	LR            float64         `json:"lr"`
	TestAccuracy  float64         `json:"test_accuracy"`
	TestLoss      float64         `json:"test_loss"`
	TrainAccuracy float64         `json:"train_accuracy"`
	TrainLoss     float64         `json:"train_loss"`
	Samples       int64           `json:"samples"`
	SamplesPerSec float64         `json:"samples_per_sec"`
	TrainSeconds  float64         `json:"train_seconds"`
	WallSeconds   float64         `json:"wall_seconds"`
	Staleness     map[int64]int64 `json:"staleness"`
	Dropped       int64           `json:"dropped_pushes"`
	FailedWorkers []int           `json:"failed_workers"`
	Saved         string          `json:"saved,omitempty"`
	// With --stats: the workers' own run time (the longest), where their
	// steps' time went, and their traffic per step.
	WorkerSeconds        float64         `json:"worker_seconds,omitempty"`
	StepTime             *bench.StepTime `json:"step_time,omitempty"`
	IdleFraction         float64         `json:"idle_fraction,omitempty"`
	BytesSentPerStep     float64         `json:"bytes_sent_per_step,omitempty"`
	BytesReceivedPerStep float64         `json:"bytes_received_per_step,omitempty"`
	// With --eval-every: rank 0's test accuracy during the run.
	Curve []bench.CurvePoint `json:"curve,omitempty"`
	// StoppedAtTarget: the run ended early at --stop-at-accuracy.
	StoppedAtTarget bool `json:"stopped_at_target,omitempty"`
}

func runTrain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("train", "Trains on this machine: starts --servers parameter-server processes and --workers\nworker processes of this binary on free loopback ports, shows their progress,\nevaluates the final weights on the test set and stops everything (also on Ctrl-C).", stderr)
	var (
		mf         modelFlags
		of         optFlags
		df         dataFlags
		tf         trainFlags
		lf         logFlags
		rf         ringFlags
		workers    = fs.Int("workers", 2, "number of worker processes")
		servers    = fs.Int("servers", 1, "number of parameter-server processes")
		chunkBytes = fs.Int("chunk-bytes", 1<<20, "bytes per chunk of the partition plan")
		save       = fs.String("save", "", "write the final parameters to this .safetensors file")
		jsonOut    = fs.Bool("json", false, "end with one JSON line summarising the run")
		startup    = fs.Duration("startup-timeout", 60*time.Second, "how long a server may take to start")
		backup     = fs.Int("backup-workers", 0, "sync: apply a step once workers minus this many pushed it")
		staleness  = fs.Int64("staleness", 1, "ssp: how many steps a worker may run ahead of the slowest (0 is sync)")
		ckptDir    = fs.String("checkpoint-dir", "", "servers checkpoint here and resume from it")
		ckptEvery  = fs.Int64("checkpoint-every", 500, "with --checkpoint-dir: checkpoint every N updates")
		testEval   = fs.Bool("test", true, "evaluate the final weights on the test set (benchmarks of large models turn it off)")
		nf         nicFlags
		sf         statFlags
	)
	nf.register(fs)
	sf.register(fs)
	mf.register(fs)
	of.register(fs, "cosine")
	df.register(fs)
	tf.register(fs)
	lf.register(fs, "warn")
	rf.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := tf.validate(); err != nil {
		return err
	}
	if err := nf.validate(); err != nil {
		return err
	}
	if err := sf.validate(); err != nil {
		return err
	}
	ring := tf.mode == "ring"
	if ring {
		*servers = 0 // no parameter server in ring mode
	} else if *servers < 1 {
		return fmt.Errorf("--servers %d: want >= 1", *servers)
	}
	if *workers < 1 {
		return fmt.Errorf("--workers %d: want >= 1", *workers)
	}
	model, err := mf.build()
	if err != nil {
		return err
	}
	// The launcher evaluates the final weights, so it loads the data too;
	// a missing dataset fails here, before any process starts.
	train, test, err := df.load(mf.seed)
	if err != nil {
		return err
	}
	if of.decay != "none" && of.decaySteps == 0 {
		// Decay over the whole run: the servers apply one update per push.
		of.decaySteps = max(totalUpdates(train.Len(), *workers, *staleness, &tf)-of.warmup, 1)
	}
	ocfg, err := of.config()
	if err != nil {
		return err
	}
	wall := time.Now()
	l, err := newLauncher(stderr)
	if err != nil {
		return err
	}
	defer l.shutdown()

	common := append(append(append(mf.args(), lf.args()...), nf.args()...), "--events")
	addrs := make([]string, *servers)
	psKids := make([]*child, *servers)
	for i := range *servers {
		args := append([]string{"ps", "--listen", "127.0.0.1:0", "--shard", strconv.Itoa(i), "--servers", strconv.Itoa(*servers),
			"--mode", tf.mode, "--chunk-bytes", strconv.Itoa(*chunkBytes), "--workers", strconv.Itoa(*workers),
			"--backup-workers", strconv.Itoa(*backup), "--staleness", strconv.FormatInt(*staleness, 10),
			"--checkpoint-dir", *ckptDir, "--checkpoint-every", strconv.FormatInt(*ckptEvery, 10)}, append(common, of.args()...)...)
		c, err := l.start(ctx, fmt.Sprintf("ps %d", i), i, args...)
		if err != nil {
			return err
		}
		ev, err := l.waitFor(ctx, c, *startup, func(e event) bool { return e.Event == "listening" })
		if err != nil {
			return err
		}
		addrs[i], psKids[i] = ev.Addr, c
	}

	lr := fmt.Sprintf("lr %g", ocfg.LR)
	if ring && rf.scaleLR {
		lr = fmt.Sprintf("lr %g × %d workers (--scale-lr, warmed up over the first epoch)", ocfg.LR, *workers)
	}
	fmt.Fprintf(stdout, "shoal train: %s, %s, %d worker(s), %d server(s), batch %d per worker, %s %s, %s\n",
		describeModel(model), tf.mode, *workers, *servers, tf.batch, ocfg.Algorithm, lr, test.Name())
	trainStart := time.Now()
	isWorker := map[*child]bool{}
	master := "127.0.0.1:0"
	for r := range *workers {
		args := append([]string{"worker", "--servers", strings.Join(addrs, ","), "--rank", strconv.Itoa(r), "--world-size", strconv.Itoa(*workers),
			"--eval=" + strconv.FormatBool(ring && *testEval)}, // ring ranks evaluate together; PS: the launcher does
			append(append(append(common, df.args()...), tf.args()...), sf.args()...)...)
		if !ring {
			args = append(args, "--compression", rf.compression)
		}
		if ring {
			args = append(append(append(args, of.args()...), rf.args()...), "--master", master)
			if r == 0 && *save != "" {
				args = append(args, "--save", *save)
			}
		}
		// Each worker gets its share of the cores, and OpenBLAS no more
		// threads than that (it would start one per core in every process).
		threads := max(1, runtime.NumCPU()/(*workers))
		args = append(args, "--threads", strconv.Itoa(threads))
		env := []string{"OPENBLAS_NUM_THREADS=" + strconv.Itoa(threads)}
		if !ring && os.Getenv("GOMAXPROCS") == "" {
			// A PS worker's Go runtime gets the same share: with one P
			// per core of the machine in every process, the transport's
			// goroutines hand each 16 KiB frame to another thread and
			// the context switches cost more than the parallelism
			// gains (async 2×1 on 2 cores: 11,169 against 10,238
			// samples/s, medians of 3 alternating runs).
			env = append(env, "GOMAXPROCS="+strconv.Itoa(threads))
		}
		c, err := l.startEnv(ctx, fmt.Sprintf("worker %d", r), r, env, args...)
		if err != nil {
			return err
		}
		isWorker[c] = true
		if ring && r == 0 {
			// Rank 0 serves the rendezvous; the others join it there.
			ev, err := l.waitFor(ctx, c, *startup, func(e event) bool { return e.Event == "listening" })
			if err != nil {
				return err
			}
			master = ev.Addr
		}
	}
	var ringTest *event

	board := newBoard(stdout, *workers, isTerminal(stdout))
	sum := trainSummary{Mode: tf.mode, Model: describeModel(model), Parameters: model.Layout().Size(), Dataset: test.Name(), Workers: *workers, Servers: *servers,
		Batch: tf.batch, Optimizer: ocfg.Algorithm, LR: ocfg.LR, Staleness: map[int64]int64{}, FailedWorkers: []int{}}
	var failures []string
	var logs []*stepLog
	for running := *workers; running > 0; {
		m, err := l.next(ctx)
		if err != nil {
			return fmt.Errorf("interrupted: %w", err)
		}
		switch {
		case m.exit && isWorker[m.from]:
			running--
			if m.from.err != nil {
				failures = append(failures, m.from.failure())
				sum.FailedWorkers = append(sum.FailedWorkers, m.from.rank)
				board.markDead(m.from.rank)
			}
		case m.exit:
			// A server died: nothing can finish without it.
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return errors.New(m.from.failure())
		case m.ev.Event == "progress":
			board.update(fromEvent(m.ev))
		case m.ev.Event == "eval":
			sum.Curve = append(sum.Curve, bench.CurvePoint{Seconds: m.ev.Seconds, Step: m.ev.Steps, Accuracy: m.ev.TestAccuracy, Loss: m.ev.TestLoss})
		case m.ev.Event == "done":
			if ring && m.ev.Rank == 0 {
				ev := m.ev
				ringTest = &ev
			}
			sum.Steps = max(sum.Steps, m.ev.Steps)
			sum.Samples += int64(m.ev.Samples)
			for k, v := range m.ev.Staleness {
				sum.Staleness[k] += v
			}
			sum.Dropped += m.ev.Dropped
			sum.WorkerSeconds = max(sum.WorkerSeconds, m.ev.Seconds)
			if m.ev.Stopped && m.ev.Rank == 0 {
				sum.StoppedAtTarget = true
				if !ring {
					// The others learn it from the launcher (ring ranks
					// agreed among themselves).
					for c := range isWorker {
						if c.rank != 0 {
							c.tell("stop")
						}
					}
				}
			}
			if m.ev.Times != nil {
				logs = append(logs, m.ev.Times)
			}
		}
	}
	if sf.stats {
		summariseSteps(&sum, logs)
	}
	board.clearBar()
	sum.TrainSeconds = time.Since(trainStart).Seconds()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("interrupted: %w", err)
	}
	if len(sum.FailedWorkers) == *workers {
		return fmt.Errorf("every worker failed:\n%s", strings.Join(failures, "\n"))
	}
	if ring && len(failures) > 0 {
		// A ring cannot finish without every rank.
		return fmt.Errorf("the ring failed:\n%s", strings.Join(failures, "\n"))
	}
	for _, f := range failures {
		fmt.Fprintln(stderr, "shoal train:", f)
	}
	sort.Ints(sum.FailedWorkers)
	if n := len(board.Epochs); n > 0 {
		sum.Epochs = board.Epochs[n-1].Epoch
		sum.TrainLoss, sum.TrainAccuracy = board.Epochs[n-1].Loss, board.Epochs[n-1].Accuracy
	}
	sum.SamplesPerSec = float64(sum.Samples) / sum.TrainSeconds

	ev := worker.Evaluation{Accuracy: -1}
	switch {
	case !*testEval:
		sum.Saved = *save
		if !ring && *save != "" {
			params, err := pullFinal(ctx, addrs, model)
			if err != nil {
				return err
			}
			meta := map[string]string{"format": "pt", "shoal_model": sum.Model, "shoal_mode": tf.mode}
			if err := nn.SaveSafetensors(*save, model.Layout(), params, meta); err != nil {
				return fmt.Errorf("--save %s: %w", *save, err)
			}
		}
	case ring:
		if ringTest == nil {
			return errors.New("rank 0 finished without reporting the test metrics")
		}
		ev = worker.Evaluation{Loss: ringTest.TestLoss, Accuracy: ringTest.TestAccuracy, Samples: ringTest.TestSamples}
		sum.Saved = *save
	default:
		params, err := pullFinal(ctx, addrs, model)
		if err != nil {
			return err
		}
		if ev, err = worker.Evaluate(ctx, model, params, test, 1000); err != nil {
			return err
		}
		if *save != "" {
			meta := map[string]string{"format": "pt", "shoal_model": sum.Model, "shoal_mode": tf.mode, "test_accuracy": fmtFloat(ev.Accuracy)}
			if err := nn.SaveSafetensors(*save, model.Layout(), params, meta); err != nil {
				return fmt.Errorf("--save %s: %w", *save, err)
			}
			sum.Saved = *save
		}
	}
	sum.TestLoss, sum.TestAccuracy = ev.Loss, ev.Accuracy
	for _, c := range psKids {
		c.stop()
	}
	l.shutdown()
	sum.WallSeconds = time.Since(wall).Seconds()

	if *testEval {
		fmt.Fprintf(stdout, "test: loss %.4f  accuracy %.2f%% (%d samples)\n", ev.Loss, 100*ev.Accuracy, ev.Samples)
	}
	fmt.Fprintf(stdout, "throughput: %.0f samples/s (%d samples in %.1fs); wall %.1fs\n", sum.SamplesPerSec, sum.Samples, sum.TrainSeconds, sum.WallSeconds)
	if mean, worst := stalenessStats(sum.Staleness); worst >= 0 {
		fmt.Fprintf(stdout, "staleness: mean %.2f, max %d updates; pushes by staleness:%s\n", mean, worst, histogram(sum.Staleness))
	}
	if sum.Dropped > 0 {
		fmt.Fprintf(stdout, "backup workers: %d late pushes dropped\n", sum.Dropped)
	}
	if sum.StoppedAtTarget {
		fmt.Fprintf(stdout, "stopped early: rank 0 measured test accuracy >= %g after %d steps\n", sf.stopAt, sum.Steps)
	}
	if sum.Saved != "" {
		fmt.Fprintf(stdout, "saved: %s\n", sum.Saved)
	}
	if *jsonOut {
		b, err := json.Marshal(sum)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s\n", b)
	}
	if len(failures) > 0 {
		return fmt.Errorf("%d of %d workers failed (the others finished)", len(failures), *workers)
	}
	return nil
}

// totalUpdates is how many optimizer steps each server takes in a run:
// one per step in sync mode, else one per push (every worker pushes once
// per push-every steps).
func totalUpdates(n, workers int, staleness int64, tf *trainFlags) int64 {
	steps := tf.steps
	if steps == 0 {
		perRank := (n + workers - 1) / workers
		steps = int64(tf.epochs) * int64((perRank+tf.batch-1)/tf.batch)
	}
	if tf.mode == "sync" || tf.mode == "ring" || (tf.mode == "ssp" && staleness == 0) {
		return steps
	}
	return int64(workers) * ((steps + int64(tf.pushEvery) - 1) / int64(tf.pushEvery))
}

// pullFinal reads the final weights from the servers.
func pullFinal(ctx context.Context, addrs []string, model nn.Model) ([]float32, error) {
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := client.Dial(dctx, addrs)
	if err != nil {
		return nil, fmt.Errorf("reading the final weights: %w", err)
	}
	defer c.Close()
	params := make([]float32, model.Layout().Size())
	if _, err := c.Pull(dctx, params); err != nil {
		return nil, fmt.Errorf("reading the final weights: %w", err)
	}
	return params, nil
}

func fromEvent(e event) worker.Progress {
	return worker.Progress{Rank: e.Rank, Epoch: e.Epoch, Epochs: e.Epochs, Step: e.Step, EpochSteps: e.EpochSteps, Samples: e.Samples,
		LossSum: e.LossSum, Correct: e.Correct, Elapsed: time.Duration(e.Seconds * float64(time.Second)), EpochDone: e.EpochDone}
}

// histogram renders a staleness histogram as " 0:12 1:40 2:3".
func histogram(h map[int64]int64) string {
	keys := make([]int64, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, " %d:%d", k, h[k])
	}
	return b.String()
}

// stalenessStats returns the mean and the largest staleness of a
// histogram, or worst -1 when it is empty.
func stalenessStats(h map[int64]int64) (mean float64, worst int64) {
	worst = -1
	var n, sum int64
	for k, v := range h {
		n += v
		sum += k * v
		if v > 0 {
			worst = max(worst, k)
		}
	}
	if n > 0 {
		mean = float64(sum) / float64(n)
	}
	return mean, worst
}

// summariseSteps merges the workers' step logs into sum: phase quantiles
// over every worker's steps but its first (warm-up), the idle fraction,
// and the mean traffic per worker per step after the first.
func summariseSteps(sum *trainSummary, logs []*stepLog) {
	var all stepLog
	var sent, received float64
	var counted int
	for _, l := range logs {
		if len(l.Step) == 0 {
			continue
		}
		from := 1
		if len(l.Step) == 1 {
			from = 0
		}
		all.Step = append(all.Step, l.Step[from:]...)
		all.Data = append(all.Data, l.Data[from:]...)
		all.Compute = append(all.Compute, l.Compute[from:]...)
		all.Wait = append(all.Wait, l.Wait[from:]...)
		all.Pull = append(all.Pull, l.Pull[from:]...)
		all.Push = append(all.Push, l.Push[from:]...)
		all.Reduce = append(all.Reduce, l.Reduce[from:]...)
		if n := len(l.Step) - 1; n > 0 {
			sent += float64(l.Sent-l.FirstSent) / float64(n)
			received += float64(l.Received-l.FirstReceived) / float64(n)
		} else {
			sent += float64(l.Sent)
			received += float64(l.Received)
		}
		counted++
	}
	if counted == 0 {
		return
	}
	st := bench.StepTime{Step: quantiles(all.Step), Data: quantiles(all.Data), Compute: quantiles(all.Compute), Wait: quantiles(all.Wait),
		Pull: quantiles(all.Pull), Push: quantiles(all.Push), Reduce: quantiles(all.Reduce)}
	sum.StepTime = &st
	if st.Step.Mean > 0 {
		sum.IdleFraction = max(0, 1-st.Compute.Mean/st.Step.Mean)
	}
	sum.BytesSentPerStep, sum.BytesReceivedPerStep = sent/float64(counted), received/float64(counted)
}

// quantiles summarises durations in seconds (nearest-rank percentiles).
func quantiles(v []float64) bench.Quantiles {
	if len(v) == 0 {
		return bench.Quantiles{}
	}
	s := slices.Clone(v)
	slices.Sort(s)
	var total float64
	for _, x := range s {
		total += x
	}
	rank := func(p float64) float64 { return s[max(0, int(math.Ceil(p*float64(len(s))))-1)] }
	return bench.Quantiles{Mean: total / float64(len(s)), P50: rank(0.50), P95: rank(0.95)}
}
