package bench

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/record"
)

// fabricate returns a plausible Results for the tests and the committed
// testdata/results.json: models "mlp" and "big" (the communication-heavy
// one), modes async/sync/ssp with 1 and 2 servers, ring and a PyTorch DDP
// peer, 1, 2 and 4 workers each, on a modelled 10 Gbit/s NIC. One run
// (big/ssp/w4/s2) failed. Every number follows from a simple cost model, so
// the file is the same on every call.
func fabricate() *Results {
	const (
		nicGbps   = 10.0
		rttMillis = 0.2
		batch     = 64
	)
	bw := nicGbps * 1e9 / 8 // bytes/s
	type model struct {
		name          string
		params        int
		compute       float64 // seconds per step, one worker
		steps         int64
		target, final float64
		rate          float64 // convergence speed in 1/samples
	}
	models := []model{
		{name: "mlp", params: 235_146, compute: 0.004, steps: 600, target: 0.95, final: 0.978, rate: 1 / 9000.0},
		{name: "big", params: 6_400_000, compute: 0.060, steps: 240, target: 0.85, final: 0.905, rate: 1 / 7000.0},
	}
	type mode struct {
		name, peer string
		servers    []int
		commFactor float64 // measured / analytic
		waitPerW   float64 // barrier wait per extra worker, × compute
		staleEff   float64 // convergence per sample relative to sync
	}
	modes := []mode{
		{name: "async", servers: []int{1, 2}, commFactor: 1.18, staleEff: 0.80},
		{name: "sync", servers: []int{1, 2}, commFactor: 1.12, waitPerW: 0.12, staleEff: 1},
		{name: "ssp", servers: []int{1, 2}, commFactor: 1.15, waitPerW: 0.04, staleEff: 0.92},
		{name: "ring", servers: []int{0}, commFactor: 1.25, staleEff: 1},
		{name: "ddp", peer: "pytorch-ddp-gloo", servers: []int{0}, commFactor: 1.7, staleEff: 1},
	}
	r := &Results{
		Schema:   SchemaVersion,
		Started:  time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC),
		Command:  []string{"shoal", "bench", "train", "--models=mlp,big", "--modes=async,sync,ssp,ring", "--workers=1,2,4", "--servers=1,2", "--nic=10g", "--peers=pytorch-ddp-gloo"},
		Revision: "9dce25c",
		Machine: Machine{
			Hostname: "bench-1", OS: "linux", Arch: "amd64", CPUModel: "AMD EPYC 7B13",
			CPUs: 16, MemBytes: 64 << 30, Go: "go1.26.0", GEMM: "cpu/openblas", LoadAvg: 0.42,
		},
		Shaper: &ShaperCheck{ConfiguredGbps: nicGbps, MeasuredGbps: 9.87, Bytes: 256 << 20, Ratio: 0.987},
	}
	for _, m := range models {
		vec := int64(m.params) * 4
		for _, md := range modes {
			for _, s := range md.servers {
				var base float64 // samples/s of this series' 1-worker run
				for _, n := range []int{1, 2, 4} {
					id := fmt.Sprintf("%s/%s/w%d/s%d/nic%g", m.name, md.name, n, s, nicGbps)
					if md.peer != "" {
						id = md.peer + "/" + id
					}
					rec := Record{
						ID: id, Peer: md.peer, Mode: md.name, Model: m.name,
						Run:         record.Run{Parameters: m.params, Batch: batch, Optimizer: "sgd-momentum", LR: 0.01, Steps: m.steps, TestAccuracy: -1},
						VectorBytes: vec, Workers: n, Servers: s, Seed: 1, NICGbps: nicGbps, RTTMillis: rttMillis,
					}
					rec.Command = []string{"shoal", "train", "--mode=" + md.name, "--model=" + m.name, "--workers=" + strconv.Itoa(n), "--servers=" + strconv.Itoa(s), "--batch=64", "--seed=1"}
					if md.peer != "" {
						rec.Command = []string{"python3", "bench/peers/torch_train.py", "--ddp", "--backend=gloo", "--model=" + m.name, "--world-size=" + strconv.Itoa(n)}
					}
					if m.name == "big" && md.name == "ssp" && n == 4 && s == 2 {
						rec.Error = "worker 3: push: rpc error: code = Unavailable desc = connection reset by peer"
						r.Runs = append(r.Runs, rec)
						continue
					}
					// Deterministic jitter so that lines are not perfectly straight.
					jit := 1 + 0.03*math.Sin(float64(len(r.Runs))*1.7)
					compute := m.compute * jit
					data := 0.05 * compute
					wait := md.waitPerW * compute * float64(n-1)
					var analytic float64
					var pull, push, reduce float64
					var sent, recv float64
					if s > 0 {
						analytic = 2 * math.Max(float64(vec)/bw, float64(n)*float64(vec)/(float64(s)*bw))
						measured := analytic*md.commFactor + 2*rttMillis/1000
						pull, push = 0.55*measured, 0.45*measured
						sent, recv = 1.01*float64(vec), 1.01*float64(vec)
						rec.Comm = &Comm{MeasuredSeconds: sig(pull + push), AnalyticSeconds: sig(analytic), Ratio: sig((pull + push) / analytic)}
					} else if n > 1 {
						analytic = 2 * float64(n-1) / float64(n) * float64(vec) / bw
						reduce = analytic*md.commFactor + float64(2*(n-1))*rttMillis/1000
						sent = 1.01 * 2 * float64(n-1) / float64(n) * float64(vec)
						recv = sent
						rec.Comm = &Comm{MeasuredSeconds: sig(reduce), AnalyticSeconds: sig(analytic), Ratio: sig(reduce / analytic)}
					}
					other := 0.02 * compute
					step := compute + data + wait + pull + push + reduce + other
					q := func(mean, tail float64) Quantiles {
						return Quantiles{Mean: sig(mean), P50: sig(0.96 * mean), P95: sig(tail * mean)}
					}
					rec.StepTime = StepTime{
						Step: q(step, 1.25), Compute: q(compute, 1.08), Data: q(data, 1.6),
						Wait: q(wait, 2.2), Pull: q(pull, 1.4), Push: q(push, 1.4), Reduce: q(reduce, 1.3),
					}
					rec.IdleFraction = sig(1 - compute/step)
					rec.BytesSentPerStep, rec.BytesReceivedPerStep = math.Round(sent), math.Round(recv)
					rec.Samples = m.steps * int64(n*batch)
					rec.SamplesPerSec = sig(float64(n*batch) / step)
					rec.TrainSeconds = sig(float64(rec.Samples) / rec.SamplesPerSec)
					if n == 1 {
						base = rec.SamplesPerSec
					}
					eff := sig(rec.SamplesPerSec / (float64(n) * base))
					rec.ScalingEfficiency = &eff

					// Accuracy over samples seen, slower for stale modes.
					rec.TargetAccuracy = m.target
					acc := func(st int64) float64 {
						seen := float64(st) * float64(n*batch) * md.staleEff
						if md.peer != "" {
							seen *= 0.97
						}
						return m.final - (m.final-0.1)*math.Exp(-m.rate*seen/float64(n)*math.Sqrt(float64(n)))
					}
					const points = 6
					for i := 1; i <= points; i++ {
						st := m.steps * int64(i) / points
						a := sig(acc(st))
						p := CurvePoint{Seconds: sig(float64(st) * step), Step: st, Accuracy: a, Loss: sig(-math.Log(a) * 1.3)}
						rec.Curve = append(rec.Curve, p)
						if rec.SecondsToTarget == nil && a >= m.target {
							sec, stp := p.Seconds, p.Step
							rec.SecondsToTarget, rec.StepsToTarget = &sec, &stp
						}
					}
					rec.TestAccuracy = rec.Curve[len(rec.Curve)-1].Accuracy

					if s > 0 {
						rec.Staleness = fabricateStaleness(md.name, n, m.steps)
					}
					r.Runs = append(r.Runs, rec)
				}
			}
		}
	}
	return r
}

// fabricateStaleness spreads the n·steps pushes of a PS run over staleness
// values: all 0 for sync, up to 2(n−1) (geometric) for async, up to the
// bound 2 for ssp.
func fabricateStaleness(mode string, n int, steps int64) consistency.Staleness {
	total := int64(n) * steps
	maxS := 0
	switch mode {
	case "async":
		maxS = 2 * (n - 1)
	case "ssp":
		maxS = min(2, n-1)
	}
	w := make([]float64, maxS+1)
	var sum float64
	for k := range w {
		w[k] = math.Pow(0.55, math.Abs(float64(k)-float64(n-1)*0.8))
		sum += w[k]
	}
	out := make(consistency.Staleness, len(w))
	var given int64
	for k := range w {
		c := int64(float64(total) * w[k] / sum)
		if k == len(w)-1 {
			c = total - given
		}
		given += c
		if c > 0 {
			out[int64(k)] = c
		}
	}
	return out
}

// sig rounds x to 4 significant digits, to keep the fixture file short.
func sig(x float64) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'g', 4, 64), 64)
	return v
}

// fabricateSmall is the subset of fabricate() committed as
// testdata/results.json: 1 and 4 workers, ring, peers and 2 servers, which
// still covers every mode, both models, a failed run and a ring run
// without communication.
func fabricateSmall() *Results {
	r := fabricate()
	r.Runs = slices.DeleteFunc(r.Runs, func(rec Record) bool {
		return (rec.Workers != 1 && rec.Workers != 4) || rec.Servers == 1
	})
	return r
}
