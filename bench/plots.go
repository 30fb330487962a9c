package bench

import (
	"cmp"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// plotKind names the five kinds of plot WritePlots draws.
type plotKind int

const (
	plotThroughput plotKind = iota
	plotBreakdown
	plotAccuracy
	plotStaleness
	plotComm
)

// plotSpec is one planned plot: what it shows, from which runs, and why
// it is skipped when it is.
type plotSpec struct {
	kind  plotKind
	file  string // base name of the PNG
	title string
	model string
	nic   float64
	runs  []*Record
	// skip, when set, says why the plot is not drawn (no data).
	skip string
}

// planPlots decides which plots results r makes. WritePlots draws the
// specs that are not skipped; WriteReport embeds or explains them, so both
// agree on names and titles.
func planPlots(r *Results) []plotSpec {
	runs := sortedRuns(r.Runs)
	ok := func(f func(*Record) bool) []*Record {
		var out []*Record
		for _, rec := range runs {
			if !rec.failed() && f(rec) {
				out = append(out, rec)
			}
		}
		return out
	}
	models := modelOrder(r.Runs)
	var specs []plotSpec

	// (a) Throughput vs workers, per model (and NIC, when several).
	nics := distinct(ok(func(*Record) bool { return true }), func(rec *Record) float64 { return rec.NICGbps })
	for _, m := range models {
		for _, nic := range nics {
			sel := ok(func(rec *Record) bool { return rec.Model == m && rec.NICGbps == nic && rec.SamplesPerSec > 0 })
			if len(sel) == 0 && len(nics) > 1 {
				continue
			}
			s := plotSpec{kind: plotThroughput, model: m, nic: nic, runs: sel,
				file:  "throughput-" + fileSafe(m) + nicSuffix(nics, nic) + ".png",
				title: "Throughput vs workers, model " + m + nicTitle(nics, nic)}
			if len(sel) == 0 {
				s.skip = "no run of model " + m + " measured throughput"
			}
			specs = append(specs, s)
		}
	}
	if len(models) == 0 {
		specs = append(specs, plotSpec{kind: plotThroughput, file: "throughput.png", title: "Throughput vs workers",
			skip: "the results hold no runs"})
	}

	// (b) Step-time breakdown of the communication-heavy model.
	heavy := commHeavyModel(ok(func(*Record) bool { return true }))
	bd := plotSpec{kind: plotBreakdown, model: heavy, file: "breakdown.png", title: "Step-time breakdown"}
	if heavy == "" {
		bd.skip = "no run completed"
	} else {
		bd.file = "breakdown-" + fileSafe(heavy) + ".png"
		bd.title = "Step-time breakdown, model " + heavy + " (mean per step)"
		// Failed runs keep their slot, labelled, so that a gap is explained.
		var measured int
		for _, rec := range runs {
			if rec.Model != heavy {
				continue
			}
			if rec.failed() || rec.StepTime.Step.Mean > 0 {
				bd.runs = append(bd.runs, rec)
			}
			if !rec.failed() && rec.StepTime.Step.Mean > 0 {
				measured++
			}
		}
		if measured == 0 {
			bd.skip = "no run of model " + heavy + " measured its step time"
		}
	}
	specs = append(specs, bd)

	// (c) Test accuracy vs wall time, one line per mode, per model. A
	// curve needs a few points: runs that evaluated only once or twice
	// (short throughput runs) are left out.
	specs = append(specs, perModel(models, plotAccuracy, "accuracy", "Test accuracy vs wall time",
		"no run recorded an accuracy curve of at least 3 evaluations", func(m string) []*Record {
			return curveRepresentatives(ok(func(rec *Record) bool { return rec.Model == m && len(rec.Curve) >= 3 }))
		})...)

	// (d) Staleness histograms of the PS modes, per model.
	specs = append(specs, perModel(models, plotStaleness, "staleness", "Staleness of pushes",
		"no parameter-server run recorded staleness", func(m string) []*Record {
			return representatives(ok(func(rec *Record) bool {
				return rec.Model == m && isPS(rec.Mode) && rec.Staleness.Pushes() > 0
			}))
		})...)

	// (e) Measured vs analytic communication time.
	cs := plotSpec{kind: plotComm, file: "comm.png", title: "Communication time per step: measured vs analytic"}
	cs.runs = ok(func(rec *Record) bool {
		return rec.Comm != nil && rec.Comm.AnalyticSeconds > 0 && rec.Comm.MeasuredSeconds > 0
	})
	if len(cs.runs) == 0 {
		cs.skip = "no run has both a measured and an analytic communication time (no NIC modelled)"
	}
	specs = append(specs, cs)
	return specs
}

// perModel plans one plot of kind per model that pick finds runs for,
// named name-<model>.png; with none, one skipped plot that says why.
func perModel(models []string, kind plotKind, name, title, why string, pick func(model string) []*Record) []plotSpec {
	var specs []plotSpec
	for _, m := range models {
		if sel := pick(m); len(sel) > 0 {
			specs = append(specs, plotSpec{kind: kind, model: m, runs: sel, file: name + "-" + fileSafe(m) + ".png", title: title + ", model " + m})
		}
	}
	if len(specs) == 0 {
		specs = append(specs, plotSpec{kind: kind, file: name + ".png", title: title, skip: why})
	}
	return specs
}

// WritePlots draws PNG plots of r into dir (created if missing) and
// returns their file names, relative to dir, in the order WriteReport
// lists them: throughput vs workers per model, the step-time breakdown of
// the communication-heavy model, test accuracy vs wall time per model,
// staleness histograms per model, and measured vs analytic communication
// time. A plot without data is skipped (WriteReport says why).
func WritePlots(dir string, r *Results) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	for _, s := range planPlots(r) {
		if s.skip != "" {
			continue
		}
		if r.Simulated {
			s.title = "Simulated: " + s.title
		}
		var f *figure
		var err error
		switch s.kind {
		case plotThroughput:
			f, err = throughputPlot(s)
		case plotBreakdown:
			f, err = breakdownPlot(s)
		case plotAccuracy:
			f, err = accuracyPlot(s)
		case plotStaleness:
			f, err = stalenessPlot(s)
		case plotComm:
			f, err = commPlot(s)
		}
		if err == nil {
			err = f.save(filepath.Join(dir, s.file))
		}
		if err != nil {
			return files, fmt.Errorf("plot %s: %w", s.file, err)
		}
		files = append(files, s.file)
	}
	return files, nil
}

// figure is a plot with its legend drawn to the right of the axes, where
// it cannot cover data.
type figure struct {
	p       *plot.Plot
	entries []legendEntry
	// reverse lists the legend bottom-up (for stacked bars, so that the
	// legend reads in the order of the stack).
	reverse bool
	w, h    vg.Length
}

type legendEntry struct {
	name   string
	thumbs []plot.Thumbnailer
}

func newFigure(title, xlabel, ylabel string, w, h vg.Length) *figure {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font = sans(15)
	p.Title.Padding = vg.Points(10)
	for _, ax := range []*plot.Axis{&p.X, &p.Y} {
		ax.Label.TextStyle.Font = sans(12)
		ax.Tick.Label.Font = sans(10)
		ax.Tick.Marker = niceTicks{}
	}
	p.X.Label.Text = xlabel
	p.Y.Label.Text = ylabel
	p.Add(plotter.NewGrid())
	return &figure{p: p, w: w, h: h}
}

func sans(size float64) font.Font {
	return font.Font{Typeface: "Liberation", Variant: "Sans", Size: vg.Points(size)}
}

func (f *figure) add(name string, thumbs ...plot.Thumbnailer) {
	f.entries = append(f.entries, legendEntry{name, thumbs})
}

// legendGap is the space left and right of the legend.
const legendGap = vg.Length(12)

func (f *figure) newLegend(names []string) (plot.Legend, vg.Length) {
	l := plot.NewLegend()
	l.TextStyle.Font = sans(10)
	l.Top, l.Left = true, true
	l.Padding = vg.Points(3)
	for _, n := range names {
		l.Add(n)
	}
	if len(names) == 0 {
		return l, 0
	}
	r := l.Rectangle(draw.Canvas{})
	return l, r.Max.X - r.Min.X + 2*legendGap
}

// dataWidth estimates the width of the data area when the legend holds
// names, for sizing bars (whose widths gonum takes in points).
func (f *figure) dataWidth(names []string) vg.Length {
	_, legW := f.newLegend(names)
	return f.w - legW - vg.Inch // the y axis, its label and ticks
}

// save renders the figure as a PNG at 96 dpi.
func (f *figure) save(path string) error {
	img := vgimg.NewWith(vgimg.UseWH(f.w, f.h), vgimg.UseDPI(96))
	dc := draw.New(img)
	entries := slices.Clone(f.entries)
	if f.reverse {
		slices.Reverse(entries)
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.name
	}
	l, legW := f.newLegend(nil)
	for _, e := range entries {
		l.Add(e.name, e.thumbs...)
	}
	if len(entries) > 0 {
		_, legW = f.newLegend(names)
	}
	f.p.Draw(draw.Crop(dc, 0, -legW, 0, 0))
	if len(entries) > 0 {
		// Top of the legend level with the top of the axes, under the title.
		titleH := f.p.Title.TextStyle.Height(f.p.Title.Text) + f.p.Title.Padding
		l.Draw(draw.Crop(dc, f.w-legW+legendGap, 0, 0, -titleH-vg.Points(4)))
	}
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(out); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// modeColor is the colour of a record mode in plots (see recordModes),
// grey for others.
func modeColor(mode string) color.Color {
	_, m := lookupMode(mode)
	return m.color
}

// modeLine is a line with round markers of radius points through pts, in
// mode's colour.
func modeLine(pts plotter.XYs, mode string, radius float64) (*plotter.Line, *plotter.Scatter, error) {
	line, sc, err := plotter.NewLinePoints(pts)
	if err != nil {
		return nil, nil, err
	}
	c := modeColor(mode)
	line.Color, sc.Color = c, c
	line.Width = vg.Points(1.8)
	sc.Radius = vg.Points(radius)
	sc.Shape = draw.CircleGlyph{}
	return line, sc, nil
}

// Line dash patterns.
func dashed() []vg.Length { return []vg.Length{vg.Points(6), vg.Points(3)} }
func dotted() []vg.Length { return []vg.Length{vg.Points(2), vg.Points(2)} }
func dashDot() []vg.Length {
	return []vg.Length{vg.Points(6), vg.Points(2), vg.Points(1.5), vg.Points(2)}
}

// seriesKey groups runs into the lines of a throughput plot.
type seriesKey struct {
	peer, mode string
	servers    int
}

func (k seriesKey) label() string {
	if k.peer != "" {
		return PeerName(k.peer) + ", peer"
	}
	if isPS(k.mode) {
		return fmt.Sprintf("%s, %d server%s", k.mode, k.servers, plural(k.servers))
	}
	return k.mode
}

func throughputPlot(s plotSpec) (*figure, error) {
	// Workers on a log2 axis: 1, 2, 4, 8, … equally spaced.
	f := newFigure(s.title, "workers (log scale)", "throughput (samples/s, all workers)", 8*vg.Inch, 4.8*vg.Inch)
	var keys []seriesKey
	groups := map[seriesKey][]*Record{}
	for _, rec := range s.runs {
		k := seriesKey{peer: rec.Peer, mode: rec.Mode, servers: rec.Servers}
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], rec)
	}
	workers := distinct(s.runs, func(rec *Record) float64 { return float64(rec.Workers) })
	// Line style says the server count (PS modes), colour the mode.
	var psServers []float64
	for _, rec := range s.runs {
		if isPS(rec.Mode) && !slices.Contains(psServers, float64(rec.Servers)) {
			psServers = append(psServers, float64(rec.Servers))
		}
	}
	slices.Sort(psServers)
	for _, k := range keys {
		pts := make(plotter.XYs, 0, len(groups[k]))
		for _, rec := range groups[k] {
			pts = append(pts, plotter.XY{X: math.Log2(float64(rec.Workers)), Y: rec.SamplesPerSec})
		}
		slices.SortFunc(pts, func(a, b plotter.XY) int { return cmpFloat(a.X, b.X) })
		line, sc, err := modeLine(pts, k.mode, 3.5)
		if err != nil {
			return nil, err
		}
		switch {
		case k.peer != "":
			line.Dashes = dashed()
			sc.Shape = draw.BoxGlyph{}
		case isPS(k.mode):
			switch slices.Index(psServers, float64(k.servers)) {
			case 0:
			case 1:
				line.Dashes = dotted()
				sc.Shape = draw.TriangleGlyph{}
			default:
				line.Dashes = dashDot()
				sc.Shape = draw.PyramidGlyph{}
			}
		}
		f.p.Add(line, sc)
		f.add(k.label(), line, sc)
	}
	ticks := make(plot.ConstantTicks, len(workers))
	for i, w := range workers {
		ticks[i] = plot.Tick{Value: math.Log2(w), Label: strconv.Itoa(int(w))}
	}
	f.p.X.Tick.Marker = ticks
	f.p.X.Min, f.p.X.Max = math.Log2(workers[0])-0.2, math.Log2(workers[len(workers)-1])+0.2
	f.p.Y.Min = 0
	f.p.Y.Max *= 1.08
	return f, nil
}

// phase is one segment of a step-time bar.
type phase struct {
	name string
	get  func(*Record) float64
	c    color.Color
}

func phases() []phase {
	return []phase{
		{"compute", func(r *Record) float64 { return r.StepTime.Compute.Mean }, color.RGBA{86, 180, 233, 255}},
		{"data", func(r *Record) float64 { return r.StepTime.Data.Mean }, color.RGBA{240, 228, 66, 255}},
		{"wait", func(r *Record) float64 { return r.StepTime.Wait.Mean }, color.RGBA{213, 94, 0, 255}},
		{"pull", func(r *Record) float64 { return r.StepTime.Pull.Mean }, color.RGBA{0, 158, 115, 255}},
		{"push (+ pull)", func(r *Record) float64 { return r.StepTime.Push.Mean }, color.RGBA{0, 90, 60, 255}},
		{"reduce", func(r *Record) float64 { return r.StepTime.Reduce.Mean }, color.RGBA{230, 159, 0, 255}},
		{"other (step − phases)", func(r *Record) float64 {
			st := r.StepTime
			return max(0, st.Step.Mean-(st.Compute.Mean+st.Data.Mean+st.Wait.Mean+st.Pull.Mean+st.Push.Mean+st.Reduce.Mean))
		}, color.RGBA{190, 190, 190, 255}},
	}
}

func breakdownPlot(s plotSpec) (*figure, error) {
	// One slot per run; the series (mode, servers) are separated by an
	// empty slot.
	type group struct {
		x0   float64
		runs []*Record
	}
	var groups []group
	var labels []string
	var prev seriesKey
	nics := distinct(s.runs, func(rec *Record) float64 { return rec.NICGbps })
	for i, rec := range s.runs {
		k := seriesKey{peer: rec.Peer, mode: rec.Mode, servers: rec.Servers}
		if i == 0 || k != prev {
			if i > 0 {
				labels = append(labels, "")
			}
			groups = append(groups, group{x0: float64(len(labels))})
		}
		prev = k
		g := &groups[len(groups)-1]
		g.runs = append(g.runs, rec)
		l := barLabel(rec, len(nics) > 1)
		if rec.failed() {
			l += " (failed)"
		}
		labels = append(labels, l)
	}
	width := vg.Length(math.Max(8, math.Min(14, 2.5+0.4*float64(len(labels))))) * vg.Inch
	f := newFigure(s.title, "run (mode, s = servers, w = workers)", "time per step (ms, mean)", width, 5.4*vg.Inch)

	// The phases any run spent time in, bottom of the stack first.
	var used []phase
	for _, ph := range phases() {
		for _, rec := range s.runs {
			if !rec.failed() && ph.get(rec) > 0 {
				used = append(used, ph)
				break
			}
		}
	}
	names := make([]string, len(used))
	for i, ph := range used {
		names[i] = ph.name
	}
	slotW := f.dataWidth(names) / vg.Length(len(labels))
	barW := min(slotW*0.7, vg.Points(40))
	for _, g := range groups {
		var below *plotter.BarChart
		for _, ph := range used {
			vals := make(plotter.Values, len(g.runs))
			var any bool
			for i, rec := range g.runs {
				if !rec.failed() {
					vals[i] = ph.get(rec) * 1e3
					any = any || vals[i] > 0
				}
			}
			if !any {
				continue
			}
			bars, err := plotter.NewBarChart(vals, barW)
			if err != nil {
				return nil, err
			}
			bars.XMin = g.x0
			bars.Color = ph.c
			bars.LineStyle.Width = 0
			if below != nil {
				bars.StackOn(below)
			}
			below = bars
			f.p.Add(bars)
		}
	}
	for _, ph := range used {
		f.add(ph.name, &plotter.BarChart{Color: ph.c})
	}
	// The legend lists the phases top to bottom, like the stack.
	f.reverse = true
	f.p.NominalX(labels...)
	f.p.X.Tick.Label.Font = sans(9)
	// Upright labels when they fit their slot, else turned a quarter.
	var widest vg.Length
	for _, l := range labels {
		widest = max(widest, f.p.X.Tick.Label.Width(l))
	}
	if widest > slotW*0.9 {
		f.p.X.Tick.Label.Rotation = math.Pi / 2
		f.p.X.Tick.Label.XAlign = draw.XRight
		f.p.X.Tick.Label.YAlign = draw.YCenter
	}
	f.p.Y.Min = 0
	f.p.Y.Max *= 1.05
	return f, nil
}

// barLabel names a run on a category axis: "async s2 w4".
func barLabel(rec *Record, withNIC bool) string {
	var b strings.Builder
	if rec.Peer != "" {
		b.WriteString(shortPeer(rec.Peer))
	} else {
		b.WriteString(rec.Mode)
	}
	if isPS(rec.Mode) {
		fmt.Fprintf(&b, " s%d", rec.Servers)
	}
	fmt.Fprintf(&b, " w%d", rec.Workers)
	if withNIC {
		fmt.Fprintf(&b, " %gG", rec.NICGbps)
	}
	return b.String()
}

// shortPeer abbreviates a peer for tick labels: "pytorch-ddp-gloo" → "torch-ddp".
func shortPeer(peer string) string {
	if strings.HasPrefix(peer, "pytorch-ddp") {
		return "torch-ddp"
	}
	return peer
}

func accuracyPlot(s plotSpec) (*figure, error) {
	f := newFigure(s.title, "wall time since the workers started (s)", "test accuracy (%)", 8*vg.Inch, 4.8*vg.Inch)
	var targets []float64
	xmax := 0.0
	for _, rec := range s.runs {
		pts := make(plotter.XYs, len(rec.Curve))
		for i, p := range rec.Curve {
			pts[i] = plotter.XY{X: p.Seconds, Y: 100 * p.Accuracy}
			xmax = max(xmax, p.Seconds)
		}
		line, sc, err := modeLine(pts, rec.Mode, 2.5)
		if err != nil {
			return nil, err
		}
		if rec.Peer != "" {
			line.Dashes = dashed()
			sc.Shape = draw.BoxGlyph{}
		}
		f.p.Add(line, sc)
		label := runLabel(rec)
		if len(distinct(s.runs, func(r *Record) float64 { return r.NICGbps })) > 1 {
			if rec.NICGbps > 0 {
				label += fmt.Sprintf(", %g Gbit/s NIC", rec.NICGbps)
			} else {
				label += ", loopback"
			}
		}
		f.add(label, line, sc)
		if rec.TargetAccuracy > 0 && !slices.Contains(targets, rec.TargetAccuracy) {
			targets = append(targets, rec.TargetAccuracy)
		}
	}
	for _, t := range targets {
		line, err := plotter.NewLine(plotter.XYs{{X: 0, Y: 100 * t}, {X: xmax, Y: 100 * t}})
		if err != nil {
			return nil, err
		}
		line.Color = color.Gray{Y: 110}
		line.Dashes = dotted()
		line.Width = vg.Points(1.2)
		f.p.Add(line)
		f.add(fmt.Sprintf("target %.1f%%", 100*t), line)
	}
	f.p.X.Min = 0
	return f, nil
}

// runLabel names a run in a legend: "async (4 workers, 2 servers)".
func runLabel(rec *Record) string {
	name := rec.Mode
	if rec.Peer != "" {
		name = PeerName(rec.Peer) + ", peer"
	}
	if isPS(rec.Mode) {
		return fmt.Sprintf("%s (%d workers, %d server%s)", name, rec.Workers, rec.Servers, plural(rec.Servers))
	}
	return fmt.Sprintf("%s (%d worker%s)", name, rec.Workers, plural(rec.Workers))
}

func stalenessPlot(s plotSpec) (*figure, error) {
	f := newFigure(s.title, "staleness of a push (server versions behind)", "share of pushes (%)", 8*vg.Inch, 4.8*vg.Inch)
	names := make([]string, len(s.runs))
	maxK := 0
	for i, rec := range s.runs {
		h := rec.Staleness
		maxK = max(maxK, int(h.Worst()))
		names[i] = fmt.Sprintf("%s: mean %.2f, p95 %d", runLabel(rec), h.Mean(), h.Quantile(0.95))
	}
	// Values past 24 fold into one "≥24" category to keep ticks legible.
	const capK = 24
	cats := min(maxK, capK) + 1
	groupW := min(f.dataWidth(names)/vg.Length(cats)*0.8, vg.Points(24)*vg.Length(len(s.runs)))
	barW := groupW / vg.Length(len(s.runs))
	for i, rec := range s.runs {
		vals := make(plotter.Values, cats)
		pushes := rec.Staleness.Pushes()
		for k, n := range rec.Staleness.All() {
			vals[min(int(k), capK)] += 100 * float64(n) / float64(pushes)
		}
		bars, err := plotter.NewBarChart(vals, barW)
		if err != nil {
			return nil, err
		}
		bars.Color = modeColor(rec.Mode)
		bars.LineStyle.Width = 0
		bars.Offset = (vg.Length(i) - vg.Length(len(s.runs)-1)/2) * barW
		f.p.Add(bars)
		f.add(names[i], bars)
	}
	// Label every value while the labels fit (about 20 pt each), else
	// every every-th one, and the last.
	slotW := f.dataWidth(names) / vg.Length(cats)
	every := max(1, int(math.Ceil(float64(vg.Points(20)/slotW))))
	labels := make([]string, cats)
	for k := range labels {
		if k%every == 0 && (k == cats-1 || cats-1-k >= every) {
			labels[k] = strconv.Itoa(k)
		}
	}
	labels[cats-1] = strconv.Itoa(cats - 1)
	if maxK > capK {
		labels[capK] = "≥" + strconv.Itoa(capK)
	}
	f.p.NominalX(labels...)
	f.p.X.Min, f.p.X.Max = -0.6, float64(cats)-0.4
	f.p.Y.Min = 0
	f.p.Y.Max = math.Min(100, f.p.Y.Max*1.05)
	return f, nil
}

func commPlot(s plotSpec) (*figure, error) {
	f := newFigure(s.title, "analytic communication time per step (ms, log scale)", "measured communication time per step (ms, log scale)", 8*vg.Inch, 5.2*vg.Inch)
	lo, hi := math.Inf(1), math.Inf(-1)
	models := firstSeen(s.runs, func(rec *Record) string { return rec.Model })
	// Hollow shapes, so that runs with nearly equal times stay visible.
	shapes := []draw.GlyphDrawer{draw.RingGlyph{}, draw.TriangleGlyph{}, draw.SquareGlyph{}, draw.CrossGlyph{}, draw.PlusGlyph{}}
	type key struct {
		sys   string
		model string
	}
	var systems []string
	sysMode := map[string]string{}
	groups := map[key]plotter.XYs{}
	var keys []key
	for _, rec := range s.runs {
		x, y := rec.Comm.AnalyticSeconds*1e3, rec.Comm.MeasuredSeconds*1e3
		lo, hi = math.Min(lo, math.Min(x, y)), math.Max(hi, math.Max(x, y))
		k := key{rec.System(), rec.Model}
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], plotter.XY{X: math.Log10(x), Y: math.Log10(y)})
		if !slices.Contains(systems, k.sys) {
			systems = append(systems, k.sys)
			sysMode[k.sys] = rec.Mode
		}
	}
	// Both axes are log10 of milliseconds on a linear scale, labelled
	// with the milliseconds (gonum's LogScale misplaces the axis label's
	// room, which squashes the plot).
	lo, hi = math.Log10(lo/1.6), math.Log10(hi*1.6)
	ref, err := plotter.NewLine(plotter.XYs{{X: lo, Y: lo}, {X: hi, Y: hi}})
	if err != nil {
		return nil, err
	}
	ref.Color = color.Gray{Y: 90}
	ref.Dashes = dashed()
	f.p.Add(ref)
	twice, err := plotter.NewLine(plotter.XYs{{X: lo, Y: lo + math.Log10(2)}, {X: hi - math.Log10(2), Y: hi}})
	if err != nil {
		return nil, err
	}
	twice.Color = color.Gray{Y: 150}
	twice.Dashes = dotted()
	f.p.Add(twice)
	for _, k := range keys {
		sc, err := plotter.NewScatter(groups[k])
		if err != nil {
			return nil, err
		}
		sc.Color = modeColor(sysMode[k.sys])
		sc.Radius = vg.Points(4.5)
		sc.Shape = shapes[slices.Index(models, k.model)%len(shapes)]
		f.p.Add(sc)
	}
	// Legend: colour says the mode, shape the model.
	f.add("measured = analytic", ref)
	f.add("measured = 2 × analytic", twice)
	for _, sys := range systems {
		f.add(sys, &plotter.Scatter{GlyphStyle: draw.GlyphStyle{Color: modeColor(sysMode[sys]), Radius: vg.Points(4), Shape: draw.CircleGlyph{}}})
	}
	for i, m := range models {
		f.add("model "+m, &plotter.Scatter{GlyphStyle: draw.GlyphStyle{Color: color.Gray{Y: 40}, Radius: vg.Points(4), Shape: shapes[i%len(shapes)]}})
	}
	f.p.X.Tick.Marker, f.p.Y.Tick.Marker = logTicks{}, logTicks{}
	f.p.X.Min, f.p.X.Max = lo, hi
	f.p.Y.Min, f.p.Y.Max = lo, hi
	return f, nil
}

// logTicks are for an axis of log10(v): they label v at 1, 2 and 5 times
// each power of ten, with minor ticks in between, so that a range of one
// or two decades still has labels.
type logTicks struct{}

func (logTicks) Ticks(loExp, hiExp float64) []plot.Tick {
	lo, hi := math.Pow(10, loExp), math.Pow(10, hiExp)
	var ticks []plot.Tick
	for e := math.Floor(math.Log10(lo)); math.Pow(10, e) <= hi; e++ {
		base := math.Pow(10, e)
		for m := 1; m < 10; m++ {
			v := float64(m) * base
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: math.Log10(v)}
			if m == 1 || m == 2 || m == 5 {
				t.Label = thousands(strconv.FormatFloat(v, 'f', max(0, -int(e)), 64))
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}

// niceTicks puts about six labelled ticks at 1, 2, 2.5 or 5 times a power
// of ten, labelled without needless decimals and with thousands
// separators, and a minor tick between each.
type niceTicks struct{}

func (niceTicks) Ticks(lo, hi float64) []plot.Tick {
	span := hi - lo
	if !(span > 0) || math.IsInf(span, 0) {
		return plot.DefaultTicks{}.Ticks(lo, hi)
	}
	raw := span / 6
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := 10 * mag
	for _, m := range []float64{1, 2, 2.5, 5} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	decimals := max(0, -int(math.Floor(math.Log10(step)+1e-9)))
	if math.Abs(step/math.Pow(10, -float64(decimals))-math.Round(step/math.Pow(10, -float64(decimals)))) > 1e-6 {
		decimals++ // 2.5, 0.25: one more digit
	}
	var ticks []plot.Tick
	for i := math.Ceil(lo/step - 1e-9); ; i++ {
		v := i * step
		if v > hi+step*1e-9 {
			break
		}
		if math.Abs(v) < step*1e-9 {
			v = 0
		}
		label := strconv.FormatFloat(v, 'f', decimals, 64)
		if decimals == 0 {
			label = thousands(label)
		}
		ticks = append(ticks, plot.Tick{Value: v, Label: label})
		if mid := v + step/2; mid <= hi {
			ticks = append(ticks, plot.Tick{Value: mid})
		}
	}
	if first := math.Ceil(lo/step-1e-9)*step - step/2; first >= lo {
		ticks = append(ticks, plot.Tick{Value: first})
	}
	return ticks
}

// representatives keeps one run per system (mode or peer): the one with
// the most workers, then the most servers, so that a plot has one line per
// mode.
func representatives(runs []*Record) []*Record {
	return bestPer(runs, (*Record).System, func(rec, b *Record) bool {
		return rec.Workers > b.Workers || (rec.Workers == b.Workers && rec.Servers > b.Servers)
	})
}

// curveRepresentatives picks, per system and network, the run with the
// longest accuracy curve (most points, then most workers): the runs that
// trained longest show convergence best, and a run on loopback is not
// mixed up with one through a modelled NIC.
func curveRepresentatives(runs []*Record) []*Record {
	type key struct {
		system string
		nic    float64
	}
	return bestPer(runs, func(rec *Record) key { return key{rec.System(), rec.NICGbps} }, func(rec, b *Record) bool {
		return len(rec.Curve) > len(b.Curve) || (len(rec.Curve) == len(b.Curve) && rec.Workers > b.Workers)
	})
}

// bestPer keeps, for each value of key, the best of the runs with it
// (better(rec, b) reports whether rec beats b; of equals, the earliest),
// in the order the keys first appear in runs.
func bestPer[K comparable](runs []*Record, key func(*Record) K, better func(rec, b *Record) bool) []*Record {
	best := map[K]*Record{}
	var order []K
	for _, rec := range runs {
		k := key(rec)
		b, ok := best[k]
		if !ok {
			order = append(order, k)
		}
		if !ok || better(rec, b) {
			best[k] = rec
		}
	}
	out := make([]*Record, len(order))
	for i, k := range order {
		out[i] = best[k]
	}
	return out
}

// commHeavyModel is the model with the largest parameter vector.
func commHeavyModel(runs []*Record) string {
	var m string
	var most int64 = -1
	for _, rec := range runs {
		if rec.VectorBytes > most {
			m, most = rec.Model, rec.VectorBytes
		}
	}
	return m
}

// distinct returns the values get takes over runs, each once, in
// ascending order.
func distinct[T cmp.Ordered](runs []*Record, get func(*Record) T) []T {
	out := firstSeen(runs, get)
	slices.Sort(out)
	return out
}

// firstSeen returns the values get takes over runs, each once, in the
// order of the runs that first take them.
func firstSeen[T comparable](runs []*Record, get func(*Record) T) []T {
	var out []T
	for _, rec := range runs {
		if v := get(rec); !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// fileSafe keeps letters, digits, '.', '-' and '_' of a name for a file name.
func fileSafe(s string) string {
	s = strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-', r == '_':
			return r
		}
		return '_'
	}, s)
	if s == "" {
		return "_"
	}
	return s
}

func nicSuffix(nics []float64, nic float64) string {
	if len(nics) <= 1 {
		return ""
	}
	if nic == 0 {
		return "-loopback"
	}
	return "-nic" + strconv.FormatFloat(nic, 'g', -1, 64)
}

// nicTitle names the network in a title: nothing when no run modelled a
// NIC, "loopback" for the runs without one when others had one.
func nicTitle(nics []float64, nic float64) string {
	if nic == 0 {
		if len(nics) > 1 {
			return ", loopback (no NIC model)"
		}
		return ""
	}
	return fmt.Sprintf(", NIC %g Gbit/s", nic)
}
