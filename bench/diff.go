package bench

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"unicode/utf8"
)

// Side says in which of two results files a run is.
type Side int

const (
	// Both: the run is in A and B (matched by ID).
	Both Side = iota
	// OnlyA: the run is only in A (the old file).
	OnlyA
	// OnlyB: the run is only in B (the new file).
	OnlyB
)

func (s Side) String() string {
	switch s {
	case Both:
		return "both"
	case OnlyA:
		return "only in A"
	case OnlyB:
		return "only in B"
	}
	return fmt.Sprintf("Side(%d)", int(s))
}

// Change is one measurement in A and in B.
type Change struct {
	A, B float64
	// OK is false when either side lacks the measurement (the run failed,
	// had no modelled NIC, did not evaluate or never reached the target);
	// the side that lacks it is then 0, and Delta and Percent are NaN.
	OK bool
}

// Delta is B − A, NaN when !OK.
func (c Change) Delta() float64 {
	if !c.OK {
		return math.NaN()
	}
	return c.B - c.A
}

// Percent is 100·(B − A)/A, NaN when !OK or A is 0.
func (c Change) Percent() float64 {
	if !c.OK || c.A == 0 {
		return math.NaN()
	}
	return 100 * (c.B - c.A) / c.A
}

// DiffRow compares one run (one ID) of two results files.
type DiffRow struct {
	ID   string
	Side Side
	// A and B are the records; nil on the side the run is missing from.
	A, B *Record

	// The changes, valid when Side is Both.
	SamplesPerSec    Change // samples/s, all workers together
	StepP50, StepP95 Change // seconds
	CommSeconds      Change // measured communication seconds per step
	BytesSentPerStep Change // bytes per worker per step
	TestAccuracy     Change // fraction in [0, 1]
	SecondsToTarget  Change // seconds

	// Notes lists configuration that differs between A and B (e.g.
	// "batch 64 → 128"), which makes the numbers not comparable.
	Notes []string
}

// Diff matches the records of a (old) and b (new) by ID. Rows come in A's
// order (matched runs and runs only in A), then the runs only in B in B's
// order.
func Diff(a, b *Results) []DiffRow {
	inB := make(map[string]*Record, len(b.Runs))
	for i := range b.Runs {
		if _, dup := inB[b.Runs[i].ID]; !dup {
			inB[b.Runs[i].ID] = &b.Runs[i]
		}
	}
	seen := make(map[string]bool, len(a.Runs))
	var rows []DiffRow
	for i := range a.Runs {
		ra := &a.Runs[i]
		if seen[ra.ID] {
			continue
		}
		seen[ra.ID] = true
		rb, ok := inB[ra.ID]
		if !ok {
			rows = append(rows, DiffRow{ID: ra.ID, Side: OnlyA, A: ra})
			continue
		}
		rows = append(rows, compare(ra, rb))
	}
	for i := range b.Runs {
		rb := &b.Runs[i]
		if seen[rb.ID] {
			continue
		}
		seen[rb.ID] = true
		rows = append(rows, DiffRow{ID: rb.ID, Side: OnlyB, B: rb})
	}
	return rows
}

func compare(a, b *Record) DiffRow {
	row := DiffRow{ID: a.ID, Side: Both, A: a, B: b}
	// ch pairs a measurement of both sides; has says whether a record has
	// it at all.
	ch := func(get func(*Record) float64, has func(*Record) bool) Change {
		c := Change{OK: true}
		if !a.failed() && has(a) {
			c.A = get(a)
		} else {
			c.OK = false
		}
		if !b.failed() && has(b) {
			c.B = get(b)
		} else {
			c.OK = false
		}
		return c
	}
	always := func(*Record) bool { return true }
	row.SamplesPerSec = ch(func(r *Record) float64 { return r.SamplesPerSec }, always)
	row.StepP50 = ch(func(r *Record) float64 { return r.StepTime.Step.P50 }, always)
	row.StepP95 = ch(func(r *Record) float64 { return r.StepTime.Step.P95 }, always)
	row.CommSeconds = ch(func(r *Record) float64 { return r.Comm.MeasuredSeconds },
		func(r *Record) bool { return r.Comm != nil })
	row.BytesSentPerStep = ch(func(r *Record) float64 { return r.BytesSentPerStep }, always)
	row.TestAccuracy = ch(func(r *Record) float64 { return r.TestAccuracy },
		func(r *Record) bool { return r.TestAccuracy >= 0 })
	row.SecondsToTarget = ch(func(r *Record) float64 { return *r.SecondsToTarget },
		func(r *Record) bool { return r.SecondsToTarget != nil })

	note := func(what string, x, y any) {
		if x != y {
			row.Notes = append(row.Notes, fmt.Sprintf("%s %v → %v", what, x, y))
		}
	}
	note("parameters", a.Parameters, b.Parameters)
	note("batch", a.Batch, b.Batch)
	note("steps", a.Steps, b.Steps)
	note("optimizer", a.Optimizer, b.Optimizer)
	note("lr", a.LR, b.LR)
	note("nic_gbps", a.NICGbps, b.NICGbps)
	note("rtt_ms", a.RTTMillis, b.RTTMillis)
	note("target_accuracy", a.TargetAccuracy, b.TargetAccuracy)
	return row
}

// WriteDiff writes Diff(a, b) as a text table: a header naming each file's
// revision and machine (with a warning when the machines differ), one block
// per matched run with each measurement in A and B and its change, then the
// runs only in A and only in B.
func WriteDiff(w io.Writer, a, b *Results) error {
	ew := &errWriter{w: w}
	ew.printf("A: %s\n", describeResults(a))
	ew.printf("B: %s\n", describeResults(b))
	if warn := machineWarning(a.Machine, b.Machine); warn != "" {
		ew.printf("WARNING: %s\n", warn)
	}
	ew.printf("\n")

	rows := Diff(a, b)
	metrics := diffMetrics()
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
	var matched, onlyA, onlyB int
	for _, r := range rows {
		switch r.Side {
		case Both:
			matched++
		case OnlyA:
			onlyA++
		case OnlyB:
			onlyB++
		}
	}
	if matched > 0 {
		// Right-aligned numbers; the two text columns are padded by hand
		// so that they read left-aligned.
		idW, metW := len("run"), len("metric")
		for _, r := range rows {
			if r.Side == Both {
				idW = max(idW, utf8.RuneCountInString(r.ID))
			}
		}
		for _, m := range metrics {
			metW = max(metW, utf8.RuneCountInString(m.name))
		}
		left := func(s string, n int) string { return s + strings.Repeat(" ", max(0, n-utf8.RuneCountInString(s))) }
		// Failures and configuration differences go after the last
		// column, which tabwriter leaves unaligned.
		fmt.Fprintf(tw, "%s\t%s\tA\tB\tchange\tchange %%\t\n", left("run", idW), left("metric", metW))
		for _, r := range rows {
			if r.Side != Both {
				continue
			}
			var notes []string
			if r.A.failed() {
				notes = append(notes, "A failed: "+r.A.Error)
			}
			if r.B.failed() {
				notes = append(notes, "B failed: "+r.B.Error)
			}
			for _, n := range r.Notes {
				notes = append(notes, "differs: "+n)
			}
			for i := 0; i < max(len(metrics), len(notes)); i++ {
				id, cells, note := "", "\t\t\t\t", ""
				if i == 0 {
					id = r.ID
				}
				name := ""
				if i < len(metrics) {
					m := metrics[i]
					name = m.name
					c := m.get(&r)
					cells = fmt.Sprintf("%s\t%s\t%s\t%s", m.side(c.A, m.has(r.A)), m.side(c.B, m.has(r.B)), m.delta(c), percent(c))
				}
				if i < len(notes) {
					note = "  " + notes[i]
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", left(id, idW), left(name, metW), cells, note)
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	} else {
		ew.printf("No run is in both files.\n")
	}
	for _, side := range []Side{OnlyA, OnlyB} {
		n := onlyA
		if side == OnlyB {
			n = onlyB
		}
		if n == 0 {
			continue
		}
		ew.printf("\nRuns %s (%d):\n", side, n)
		for _, r := range rows {
			if r.Side != side {
				continue
			}
			rec := r.A
			if side == OnlyB {
				rec = r.B
			}
			if rec.failed() {
				ew.printf("  %s  failed: %s\n", r.ID, rec.Error)
			} else {
				ew.printf("  %s  %s samples/s, step p50 %s ms\n", r.ID, num(rec.SamplesPerSec), ms(rec.StepTime.Step.P50))
			}
		}
	}
	return ew.err
}

// diffMetric is one line of a matched run's block in WriteDiff.
type diffMetric struct {
	name string
	get  func(*DiffRow) Change
	// scale converts the stored unit to the displayed one.
	scale float64
	// present says whether a run that did not fail has this measurement;
	// nil means always.
	present func(*Record) bool
	// points: the change is shown in percentage points (accuracy).
	points bool
}

func diffMetrics() []diffMetric {
	return []diffMetric{
		{name: "samples/s", get: func(r *DiffRow) Change { return r.SamplesPerSec }, scale: 1},
		{name: "step p50 (ms)", get: func(r *DiffRow) Change { return r.StepP50 }, scale: 1e3},
		{name: "step p95 (ms)", get: func(r *DiffRow) Change { return r.StepP95 }, scale: 1e3},
		{name: "comm measured (ms/step)", get: func(r *DiffRow) Change { return r.CommSeconds }, scale: 1e3,
			present: func(r *Record) bool { return r.Comm != nil }},
		{name: "sent (MiB/step/worker)", get: func(r *DiffRow) Change { return r.BytesSentPerStep }, scale: 1.0 / (1 << 20)},
		{name: "test accuracy (%)", get: func(r *DiffRow) Change { return r.TestAccuracy }, scale: 100, points: true,
			present: func(r *Record) bool { return r.TestAccuracy >= 0 }},
		{name: "time to target (s)", get: func(r *DiffRow) Change { return r.SecondsToTarget }, scale: 1,
			present: func(r *Record) bool { return r.SecondsToTarget != nil }},
	}
}

// has says whether rec has the metric (to show one side alone).
func (m diffMetric) has(rec *Record) bool {
	if rec == nil || rec.failed() {
		return false
	}
	if m.present == nil {
		return true
	}
	return m.present(rec)
}

func (m diffMetric) side(v float64, present bool) string {
	if !present {
		return "—"
	}
	return num(v * m.scale)
}

func (m diffMetric) delta(c Change) string {
	if !c.OK {
		return "—"
	}
	s := signed(c.Delta() * m.scale)
	if m.points {
		s += " pp"
	}
	return s
}

func percent(c Change) string {
	p := c.Percent()
	if math.IsNaN(p) {
		return "—"
	}
	if s := fmt.Sprintf("%+.1f%%", p); s != "+0.0%" && s != "-0.0%" {
		return s
	}
	return "0.0%"
}

// describeResults is one line naming a results file's revision, start and
// machine.
func describeResults(r *Results) string {
	m := r.Machine
	return fmt.Sprintf("revision %s, started %s, %s: %d× %s, %s/%s, %s, %s, load %.2f",
		r.Revision, r.Started.UTC().Format("2006-01-02 15:04 MST"), orUnknown(m.Hostname),
		m.CPUs, orUnknown(m.CPUModel), m.OS, m.Arch, orUnknown(m.GEMM), orUnknown(m.Go), m.LoadAvg)
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// machineWarning says how two machines differ in what makes throughput
// comparable (CPU model and count), or "" when they do not.
func machineWarning(a, b Machine) string {
	var diffs []string
	if a.CPUModel != b.CPUModel {
		diffs = append(diffs, fmt.Sprintf("cpu_model %q vs %q", a.CPUModel, b.CPUModel))
	}
	if a.CPUs != b.CPUs {
		diffs = append(diffs, fmt.Sprintf("cpus %d vs %d", a.CPUs, b.CPUs))
	}
	if len(diffs) == 0 {
		return ""
	}
	return "the machines differ (" + strings.Join(diffs, ", ") + "): compare ratios within one file, not absolute numbers across them"
}

// errWriter remembers the first write error.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}

func (e *errWriter) printf(format string, args ...any) {
	fmt.Fprintf(e, format, args...)
}
