package bench

import (
	"fmt"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// LinePlot is a plot of lines in the harness's style: accuracy against
// epochs of emulated jobs (package emulate), efficiency against workers
// of simulated ones (shoal bench plan).
type LinePlot struct {
	Title, XLabel, YLabel string
	// LogX puts X on a log scale (base 10 ticks), for worker counts.
	LogX   bool
	Curves []Curve
}

// Curve is one line of a LinePlot.
type Curve struct {
	Label string
	// Mode colours the line as the harness's plots colour modes; Dash
	// tells apart the lines of one mode (0 solid, 1 dashed, 2 dotted,
	// 3 dash-dot).
	Mode string
	Dash int
	X, Y []float64
}

// Write draws the plot as a PNG at path.
func (lp LinePlot) Write(path string) error {
	f := newFigure(lp.Title, lp.XLabel, lp.YLabel, 8*vg.Inch, 4.8*vg.Inch)
	if lp.LogX {
		f.p.X.Scale = plot.LogScale{}
		f.p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	for _, c := range lp.Curves {
		if len(c.X) != len(c.Y) || len(c.X) == 0 {
			return fmt.Errorf("curve %q: %d x and %d y values, want as many and some", c.Label, len(c.X), len(c.Y))
		}
		pts := make(plotter.XYs, len(c.X))
		for i := range pts {
			pts[i] = plotter.XY{X: c.X[i], Y: c.Y[i]}
		}
		line, sc, err := modeLine(pts, c.Mode, 1.8)
		if err != nil {
			return err
		}
		switch c.Dash % 4 {
		case 1:
			line.Dashes, sc.Shape = dashed(), draw.BoxGlyph{}
		case 2:
			line.Dashes, sc.Shape = dotted(), draw.TriangleGlyph{}
		case 3:
			line.Dashes, sc.Shape = dashDot(), draw.PyramidGlyph{}
		}
		f.p.Add(line, sc)
		f.add(c.Label, line, sc)
	}
	if !lp.LogX {
		f.p.X.Min = 0
	}
	return f.save(path)
}
