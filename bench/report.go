package bench

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/shoalml/shoal/consistency"
)

// WriteReport writes report.md for r: a header (command, revision,
// machine, shaper self-check), then tables of throughput, step-time
// breakdown, traffic, measured vs analytic communication time, time to
// target accuracy and staleness, with the plots embedded where they
// belong. plots are the file names WritePlots returned, relative to the
// report's directory; a plot WritePlots skips for lack of data is named
// with the reason. Peer runs are marked as such, failed runs listed with
// their error.
func WriteReport(w io.Writer, r *Results, plots []string) error {
	ew := &errWriter{w: w}
	rep := &report{w: ew, r: r, runs: sortedRuns(r.Runs), plots: plots}
	rep.header()
	rep.failures()
	rep.throughput()
	rep.breakdown()
	rep.traffic()
	rep.comm()
	rep.crossover()
	rep.accuracy()
	rep.staleness()
	rep.otherPlots()
	return ew.err
}

type report struct {
	w     *errWriter
	r     *Results
	runs  []*Record // sorted
	plots []string
	used  []string // plots embedded so far
	nics  []float64
}

func (rep *report) printf(format string, args ...any) { rep.w.printf(format, args...) }

func (rep *report) header() {
	r := rep.r
	m := r.Machine
	rep.printf("# Shoal training benchmark\n\n")
	if r.Simulated {
		rep.printf("**Simulated** (shoal bench simulate): every run below is the simulator's prediction, not a measurement; the machine is the one whose compute and optimizer speed it took.\n\n")
	}
	rep.printf("- **Command:** %s\n", mdCode(shellJoin(r.Command)))
	rep.printf("- **Revision:** %s\n", mdCell(orUnknown(r.Revision)))
	rep.printf("- **Started:** %s\n", r.Started.UTC().Format("2006-01-02 15:04:05 MST"))
	rep.printf("- **Machine:** %s: %d× %s, %s GiB memory, %s/%s, %s, GEMM %s, load average %.2f at the start\n",
		mdCell(orUnknown(m.Hostname)), m.CPUs, mdCell(orUnknown(m.CPUModel)), num(float64(m.MemBytes)/(1<<30)),
		mdCell(m.OS), mdCell(m.Arch), mdCell(orUnknown(m.Go)), mdCell(orUnknown(m.GEMM)), m.LoadAvg)
	if s := r.Shaper; s != nil {
		rep.printf("- **NIC shaper self-check:** configured %s Gbit/s, measured %s Gbit/s over %s MiB (ratio %.3f; runs need [0.9, 1.1])\n",
			gbps(s.ConfiguredGbps), gbps(s.MeasuredGbps), mib(float64(s.Bytes)), s.Ratio)
	} else {
		rep.printf("- **NIC shaper self-check:** none (no NIC modelled; loopback as it is)\n")
	}
	var failed, peers int
	for _, rec := range rep.runs {
		if rec.failed() {
			failed++
		}
		if rec.Peer != "" {
			peers++
		}
	}
	rep.printf("- **Runs:** %d (%d failed, %d by peers)\n\n", len(rep.runs), failed, peers)
	if peers > 0 {
		rep.printf("Rows marked \"peer\" were measured with another system in the same session (e.g. PyTorch DDP with gloo) on the same data, seed and optimizer; the others are Shoal's modes.\n\n")
	}
	rep.printf("Times are per step in milliseconds unless stated otherwise; p50 / p95 are over all workers' steps after the first. These machines are shared and noisy: compare ratios within one file.\n\n")
	rep.nics = distinct(rep.ok(), func(rec *Record) float64 { return rec.NICGbps })
}

// ok returns the runs that did not fail.
func (rep *report) ok() []*Record {
	var out []*Record
	for _, rec := range rep.runs {
		if !rec.failed() {
			out = append(out, rec)
		}
	}
	return out
}

func (rep *report) failures() {
	var failed []*Record
	for _, rec := range rep.runs {
		if rec.failed() {
			failed = append(failed, rec)
		}
	}
	if len(failed) == 0 {
		return
	}
	rep.printf("## Failed runs\n\n")
	rep.printf("These runs have no measurements and appear in no table below except Throughput.\n\n")
	rep.table([]string{"run", "system", "error"}, func(row func(...string)) {
		for _, rec := range failed {
			row(mdCell(mdCode(rec.ID)), mdCell(rec.System()), mdCell(rec.Error))
		}
	})
}

// runCols are the leading cells that name a run in every table.
func (rep *report) runCols(rec *Record) []string {
	servers := strconv.Itoa(rec.Servers)
	if !isPS(rec.Mode) {
		servers = "—"
	}
	cols := []string{mdCell(rec.Model), mdCell(rec.System()), strconv.Itoa(rec.Workers), servers}
	if len(rep.nics) > 1 {
		nic := "loopback"
		if rec.NICGbps > 0 {
			nic = gbps(rec.NICGbps)
		}
		cols = append(cols, nic)
	}
	return cols
}

func (rep *report) runHeader(more ...string) []string {
	h := []string{"model", "system", "workers", "servers"}
	if len(rep.nics) > 1 {
		h = append(h, "NIC (Gbit/s)")
	}
	return append(h, more...)
}

// runTable writes a table of recs, one row a run: the run's columns, then
// more's, filled by cells; without runs it says none completed.
func (rep *report) runTable(recs []*Record, more []string, cells func(rec *Record) []string) {
	if len(recs) == 0 {
		rep.printf("No run completed.\n\n")
		return
	}
	rep.table(rep.runHeader(more...), func(row func(...string)) {
		for _, rec := range recs {
			row(append(rep.runCols(rec), cells(rec)...)...)
		}
	})
}

func (rep *report) throughput() {
	rep.printf("## Throughput\n\n")
	rep.printf("Samples per second over all workers (samples / train time). Scaling efficiency is samples/s ÷ (workers × samples/s of the 1-worker run of the same mode and model).\n\n")
	if len(rep.runs) == 0 {
		rep.printf("No runs.\n\n")
	} else {
		rep.table(rep.runHeader("samples/s", "scaling efficiency", "steps", "train time (s)"), func(row func(...string)) {
			for _, rec := range rep.runs {
				if rec.failed() {
					row(append(rep.runCols(rec), "**failed** (see Failed runs)", "—", "—", "—")...)
					continue
				}
				eff := "—"
				if rec.ScalingEfficiency != nil {
					eff = pct(*rec.ScalingEfficiency)
				}
				row(append(rep.runCols(rec), num(rec.SamplesPerSec), eff, strconv.FormatInt(rec.Steps, 10), num(rec.TrainSeconds))...)
			}
		})
	}
	rep.embed(plotThroughput)
}

func (rep *report) breakdown() {
	rep.printf("## Step-time breakdown\n\n")
	rep.printf("p50 / p95 per phase, in milliseconds. Compute is forward and backward; data is waiting for input; wait is blocking before any byte moves (sync barrier, SSP bound); pull and push are the parameter-server transfers; reduce is the ring allreduce. Idle is the share of step time not spent computing, 1 − mean(compute) / mean(step).\n\n")
	rep.runTable(rep.ok(), []string{"step", "compute", "data", "wait", "pull", "push", "reduce", "idle"}, func(rec *Record) []string {
		st := rec.StepTime
		q := func(q Quantiles) string {
			if q == (Quantiles{}) {
				return "—" // the mode has no such phase
			}
			return ms(q.P50) + " / " + ms(q.P95)
		}
		return []string{q(st.Step), q(st.Compute), q(st.Data), q(st.Wait), q(st.Pull), q(st.Push), q(st.Reduce), pct(rec.IdleFraction)}
	})
	rep.embed(plotBreakdown)
}

func (rep *report) traffic() {
	rep.printf("## Traffic\n\n")
	rep.printf("Bytes per worker per step (mean over the workers; parameter-server modes: TCP bytes, gRPC framing included; ring: the payload the collectives moved), in MiB; M is one full parameter vector on the wire.\n\n")
	rep.runTable(rep.ok(), []string{"M (MiB)", "sent (MiB/step)", "received (MiB/step)", "sent / M", "received / M"}, func(rec *Record) []string {
		ratio := func(b float64) string {
			if rec.VectorBytes <= 0 {
				return "—"
			}
			return fmt.Sprintf("%.2f", b/float64(rec.VectorBytes))
		}
		return []string{mib(float64(rec.VectorBytes)), mib(rec.BytesSentPerStep), mib(rec.BytesReceivedPerStep),
			ratio(rec.BytesSentPerStep), ratio(rec.BytesReceivedPerStep)}
	})
}

func (rep *report) comm() {
	rep.printf("## Communication time: measured vs analytic\n\n")
	rep.printf("Measured is mean(pull + push) for the parameter-server modes and mean(reduce) for ring, per step. Analytic, with N workers, S servers, M bytes per vector and B the NIC's bytes/s per direction: ring 2(N−1)/N·M/B; PS 2·max(M/B, N·M/(S·B)), a pull and then a push; async-overlap (the push in the background while the next pull runs) max(M/B, N·M/(S·B)), both directions at once. Ring reduces the last layers' gradients while backward is still running (--fusion-bytes), so its measured time is only the part left after backward: a model whose last layers hold most of the parameters while the first do most of the compute (the CNN) hides most of it, and measures below the analytic time. Asynchronous workers drift out of step, so some pull while others push and the server's two directions carry traffic at once: async and SSP can measure below the analytic time, which assumes every worker pulls, then pushes, together.\n\n")
	var sel []*Record
	for _, rec := range rep.ok() {
		if rec.Comm != nil {
			sel = append(sel, rec)
		}
	}
	if len(sel) == 0 {
		rep.printf("No run has a communication model (no NIC was modelled).\n\n")
	} else {
		rep.table(rep.runHeader("NIC (Gbit/s)", "RTT (ms)", "measured (ms)", "analytic (ms)", "measured / analytic"), func(row func(...string)) {
			for _, rec := range sel {
				c := rec.Comm
				ratio := "—"
				if c.AnalyticSeconds > 0 {
					ratio = fmt.Sprintf("%.2f", c.Ratio)
				}
				cols := rep.runCols(rec)
				if len(rep.nics) > 1 {
					cols = cols[:len(cols)-1] // NIC has its own column here
				}
				row(append(cols, gbps(rec.NICGbps), num(rec.RTTMillis), ms(c.MeasuredSeconds), ms(c.AnalyticSeconds), ratio)...)
			}
		})
	}
	rep.embed(plotComm)
}

// crossover sets each parameter-server run's communication time beside
// the ring's at the same model, workers and network: where PS with S
// servers overtakes ring allreduce, measured and in theory.
func (rep *report) crossover() {
	type key struct {
		model   string
		workers int
		nic     float64
	}
	rings := map[key]*Record{}
	for _, rec := range rep.ok() {
		if rec.Mode == consistency.Ring.String() && rec.Peer == "" && rec.Comm != nil {
			rings[key{rec.Model, rec.Workers, rec.NICGbps}] = rec
		}
	}
	var sel []*Record
	for _, rec := range rep.ok() {
		if isPS(rec.Mode) && rec.Comm != nil && rings[key{rec.Model, rec.Workers, rec.NICGbps}] != nil {
			sel = append(sel, rec)
		}
	}
	if len(sel) == 0 {
		return
	}
	rep.printf("## Parameter servers vs ring allreduce\n\n")
	rep.printf("Each parameter-server run's communication time per step beside the ring run of the same model, workers and NIC. Below 1, the parameter servers communicate faster than the ring. In theory PS/ring = max(1, N/S) / ((N−1)/N) when a worker pulls and then pushes: with one server the PS is N²/(N−1) times slower, and from S ≥ N servers on it stays N/(N−1) times slower, because it uses one direction at a time where a ring uses both. With push and pull overlapped (async-overlap, BytePS's argument) it is half that: from S ≥ N servers the PS needs (N/2)/(N−1) of the ring's time, faster from N = 3 on.\n\n")
	rep.table([]string{"model", "workers", "mode", "servers", "NIC (Gbit/s)", "PS comm (ms)", "ring comm (ms)", "PS / ring measured", "PS / ring analytic"}, func(row func(...string)) {
		for _, rec := range sel {
			ring := rings[key{rec.Model, rec.Workers, rec.NICGbps}]
			row(rec.Model, strconv.Itoa(rec.Workers), rec.Mode, strconv.Itoa(rec.Servers), gbps(rec.NICGbps),
				ms(rec.Comm.MeasuredSeconds), ms(ring.Comm.MeasuredSeconds),
				fmt.Sprintf("%.2f", rec.Comm.MeasuredSeconds/ring.Comm.MeasuredSeconds),
				fmt.Sprintf("%.2f", rec.Comm.AnalyticSeconds/ring.Comm.AnalyticSeconds))
		}
	})
}

func (rep *report) accuracy() {
	rep.printf("## Time to accuracy\n\n")
	rep.printf("When worker 0 first measured the target test accuracy (wall seconds since the workers started, and steps), and the final weights' test accuracy.\n\n")
	rep.runTable(rep.ok(), []string{"target", "time to target (s)", "steps to target", "final test accuracy"}, func(rec *Record) []string {
		target, secs, steps := "—", "—", "—"
		if rec.TargetAccuracy > 0 {
			target = pct(rec.TargetAccuracy)
			secs, steps = "never", "never"
		}
		if rec.SecondsToTarget != nil {
			secs = num(*rec.SecondsToTarget)
		}
		if rec.StepsToTarget != nil {
			steps = strconv.FormatInt(*rec.StepsToTarget, 10)
		}
		final := "not evaluated"
		if rec.TestAccuracy >= 0 {
			final = fmt.Sprintf("%.2f%%", 100*rec.TestAccuracy)
		}
		return []string{target, secs, steps, final}
	})
	rep.embed(plotAccuracy)
}

func (rep *report) staleness() {
	rep.printf("## Staleness\n\n")
	rep.printf("Parameter-server runs: how many versions behind the server's weights were when a push arrived. Fresh is the share of pushes with staleness 0.\n\n")
	var sel []*Record
	for _, rec := range rep.ok() {
		if rec.Staleness.Pushes() > 0 {
			sel = append(sel, rec)
		}
	}
	if len(sel) == 0 {
		rep.printf("No run recorded staleness.\n\n")
	} else {
		rep.table(rep.runHeader("pushes", "mean", "p50", "p95", "max", "fresh"), func(row func(...string)) {
			for _, rec := range sel {
				h := rec.Staleness
				row(append(rep.runCols(rec), thousands(strconv.FormatInt(h.Pushes(), 10)), fmt.Sprintf("%.2f", h.Mean()),
					strconv.FormatInt(h.Quantile(0.5), 10), strconv.FormatInt(h.Quantile(0.95), 10), strconv.FormatInt(h.Worst(), 10), pct(h.Fresh()))...)
			}
		})
	}
	rep.embed(plotStaleness)
}

// embed puts the plots of one kind in: the image when WritePlots drew it,
// the reason when it skipped it.
func (rep *report) embed(k plotKind) {
	for _, s := range planPlots(rep.r) {
		if s.kind != k {
			continue
		}
		switch {
		case s.skip != "":
			rep.printf("_Plot skipped (%s): %s._\n\n", s.title, mdCell(s.skip))
		case slices.Contains(rep.plots, s.file):
			rep.printf("![%s](%s)\n\n", mdCell(s.title), mdLink(s.file))
			rep.used = append(rep.used, s.file)
		default:
			rep.printf("_Plot not rendered: %s (%s)._\n\n", mdCell(s.title), mdCell(s.file))
		}
	}
}

// otherPlots embeds plots the caller passed that no section claimed.
func (rep *report) otherPlots() {
	var rest []string
	for _, p := range rep.plots {
		if !slices.Contains(rep.used, p) {
			rest = append(rest, p)
		}
	}
	if len(rest) == 0 {
		return
	}
	rep.printf("## Other plots\n\n")
	for _, p := range rest {
		rep.printf("![%s](%s)\n\n", mdCell(p), mdLink(p))
	}
}

// table writes a Markdown table; fill calls row once per row.
func (rep *report) table(header []string, fill func(row func(cells ...string))) {
	rep.printf("| %s |\n", strings.Join(header, " | "))
	seps := make([]string, len(header))
	for i := range seps {
		seps[i] = "---"
	}
	rep.printf("|%s|\n", strings.Join(seps, "|"))
	fill(func(cells ...string) {
		rep.printf("| %s |\n", strings.Join(cells, " | "))
	})
	rep.printf("\n")
}

// mdCell makes text safe inside a Markdown table cell.
func mdCell(s string) string {
	s = strings.ReplaceAll(s, "\r\n", " ")
	s = strings.ReplaceAll(s, "\n", " ")
	s = strings.ReplaceAll(s, "|", `\|`)
	return s
}

// mdCode writes s as a Markdown code span, fenced by more backticks than
// any run of them in s.
func mdCode(s string) string {
	longest, run := 0, 0
	for _, r := range s {
		if r == '`' {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	fence := strings.Repeat("`", longest+1)
	if longest > 0 {
		return fence + " " + s + " " + fence
	}
	return fence + s + fence
}

// mdLink escapes a relative path for a Markdown link target.
func mdLink(p string) string {
	r := strings.NewReplacer(" ", "%20", "(", "%28", ")", "%29")
	return r.Replace(p)
}

// shellJoin writes argv as a shell command line, quoting where needed.
func shellJoin(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
		}) < 0 {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}
