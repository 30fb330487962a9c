package bench

import (
	"flag"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// plotDir keeps the plots of TestWritePlots for a person to look at:
// go test ./bench -run TestWritePlots -plotdir /tmp/benchplots
var plotDir = flag.String("plotdir", "", "write TestWritePlots' PNGs (and report.md) here instead of a temporary directory")

func TestWritePlots(t *testing.T) {
	dir := t.TempDir()
	if *plotDir != "" {
		dir = *plotDir
	}
	r := fabricate()
	files, err := WritePlots(dir, r)
	require.NoError(t, err)

	want := []string{
		"throughput-mlp.png", "throughput-big.png", "breakdown-big.png",
		"accuracy-mlp.png", "accuracy-big.png", "staleness-mlp.png", "staleness-big.png", "comm.png",
	}
	assert.Equal(t, want, files)
	for _, name := range files {
		t.Run(name, func(t *testing.T) {
			f, err := os.Open(filepath.Join(dir, name))
			require.NoError(t, err)
			defer f.Close()
			img, err := png.Decode(f)
			require.NoError(t, err)
			b := img.Bounds()
			assert.GreaterOrEqual(t, b.Dx(), 600, "width")
			assert.LessOrEqual(t, b.Dx(), 2000, "width")
			assert.GreaterOrEqual(t, b.Dy(), 400, "height")
			assert.LessOrEqual(t, b.Dy(), 1200, "height")
			// Not a blank canvas: count non-white pixels on a grid.
			var ink int
			for y := b.Min.Y; y < b.Max.Y; y += 3 {
				for x := b.Min.X; x < b.Max.X; x += 3 {
					r, g, bl, _ := img.At(x, y).RGBA()
					if r < 0xf000 || g < 0xf000 || bl < 0xf000 {
						ink++
					}
				}
			}
			assert.Greater(t, ink, 500, "plot looks blank")
		})
	}

	if *plotDir != "" {
		out, err := os.Create(filepath.Join(dir, "report.md"))
		require.NoError(t, err)
		require.NoError(t, WriteReport(out, r, files))
		require.NoError(t, out.Close())
	}
}

func TestWritePlotsSkipsWithoutData(t *testing.T) {
	r := fabricate()
	// Keep only the sync runs of mlp, without curves, staleness or NIC.
	r.Runs = slices.DeleteFunc(r.Runs, func(rec Record) bool { return rec.Model != "mlp" || rec.Mode != "sync" })
	for i := range r.Runs {
		r.Runs[i].Curve, r.Runs[i].Staleness, r.Runs[i].Comm = nil, nil, nil
	}
	files, err := WritePlots(t.TempDir(), r)
	require.NoError(t, err)
	assert.Equal(t, []string{"throughput-mlp.png", "breakdown-mlp.png"}, files)

	files, err = WritePlots(t.TempDir(), &Results{Schema: SchemaVersion})
	require.NoError(t, err)
	assert.Empty(t, files)
}

// WritePlots and WriteReport keep no shared state: concurrent calls are
// safe (run with -race).
func TestWritePlotsConcurrent(t *testing.T) {
	r := fabricate()
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			_, err := WritePlots(t.TempDir(), r)
			assert.NoError(t, err)
			assert.NoError(t, WriteReport(io.Discard, r, nil))
		})
	}
	wg.Wait()
}
