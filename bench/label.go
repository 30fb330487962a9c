package bench

import (
	"cmp"
	"fmt"
	"image/color"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/shoalml/shoal/consistency"
)

// The values of a Record's (and a Run's) Mode besides the training modes'
// names.
const (
	// modeAsyncOverlap is async with --overlap-push-pull: each push runs
	// in the background while the next pull does.
	modeAsyncOverlap = "async-overlap"
	// modeDDP is a peer's run: PyTorch DistributedDataParallel.
	modeDDP = "ddp"
)

// recordMode is one value of Record.Mode.
type recordMode struct {
	name  string
	mode  consistency.Mode // the training mode it runs; 0 for a peer's
	color color.Color      // in plots: Okabe–Ito hues, colour-blind-safe
}

// recordModes lists the values of Record.Mode in the order tables and
// legends list them.
func recordModes() [6]recordMode {
	return [...]recordMode{
		{consistency.Async.String(), consistency.Async, color.RGBA{213, 94, 0, 255}}, // vermillion
		{modeAsyncOverlap, consistency.Async, color.RGBA{0, 0, 0, 255}},              // black
		{consistency.Sync.String(), consistency.Sync, color.RGBA{0, 158, 115, 255}},  // bluish green
		{consistency.SSP.String(), consistency.SSP, color.RGBA{0, 114, 178, 255}},    // blue
		{consistency.Ring.String(), consistency.Ring, color.RGBA{230, 159, 0, 255}},  // orange
		{modeDDP, 0, color.RGBA{204, 121, 167, 255}},                                 // reddish purple
	}
}

// lookupMode returns the place of the record mode name in recordModes and
// its entry: after all of them and grey, with no training mode, when it is
// none of them.
func lookupMode(name string) (int, recordMode) {
	all := recordModes()
	for i, m := range all {
		if m.name == name {
			return i, m
		}
	}
	return len(all), recordMode{name: name, color: color.RGBA{90, 90, 90, 255}}
}

// modeRank orders modes the way tables and legends list them.
func modeRank(mode string) int {
	i, _ := lookupMode(mode)
	return i
}

// isPS says whether mode runs against parameter servers.
func isPS(mode string) bool {
	_, m := lookupMode(mode)
	return m.mode.UsesServers()
}

// trainingModes are the record modes of Shoal's own runs, in the order
// of recordModes.
func trainingModes() []string {
	var out []string
	for _, m := range recordModes() {
		if m.mode != 0 {
			out = append(out, m.name)
		}
	}
	return out
}

// PeerName is the human name of a peer system, e.g. "pytorch-ddp-gloo" →
// "PyTorch DDP (gloo)"; unknown names come back as they are.
func PeerName(peer string) string {
	if backend, ok := strings.CutPrefix(peer, "pytorch-ddp-"); ok && backend != "" {
		return "PyTorch DDP (" + backend + ")"
	}
	if peer == "pytorch-ddp" {
		return "PyTorch DDP"
	}
	return peer
}

// System names what ran a record: the mode for Shoal's own runs, the
// peer's name followed by ", peer" otherwise.
func (r *Record) System() string {
	if r.Peer != "" {
		return PeerName(r.Peer) + ", peer"
	}
	return r.Mode
}

// failed says whether the run failed (its measurements are absent).
func (r *Record) failed() bool { return r.Error != "" }

// modelOrder lists the models in the order they first appear in runs.
func modelOrder(runs []Record) []string {
	var out []string
	for _, r := range runs {
		if !slices.Contains(out, r.Model) {
			out = append(out, r.Model)
		}
	}
	return out
}

// sortedRuns returns pointers to the runs ordered by model (first
// appearance), Shoal before peers, mode, NIC, servers, workers, so that
// one series reads down a table by workers.
func sortedRuns(runs []Record) []*Record {
	models := modelOrder(runs)
	out := make([]*Record, len(runs))
	for i := range runs {
		out[i] = &runs[i]
	}
	slices.SortStableFunc(out, func(a, b *Record) int {
		return cmp.Or(
			cmp.Compare(slices.Index(models, a.Model), slices.Index(models, b.Model)),
			cmp.Compare(a.Peer, b.Peer),
			cmp.Compare(modeRank(a.Mode), modeRank(b.Mode)),
			cmp.Compare(a.Mode, b.Mode),
			cmp.Compare(a.NICGbps, b.NICGbps),
			cmp.Compare(a.Servers, b.Servers),
			cmp.Compare(a.Workers, b.Workers),
			cmp.Compare(a.ID, b.ID),
		)
	})
	return out
}

// num formats a value with about three significant digits and thousands
// separators for large ones: 12,345 · 123 · 12.3 · 1.23 · 0.0123.
func num(v float64) string {
	switch a := math.Abs(v); {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return "—"
	case a >= 1000:
		return thousands(fmt.Sprintf("%.0f", v))
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	case a == 0:
		return "0"
	default:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
}

// signed is num with an explicit sign (none for 0).
func signed(v float64) string {
	s := num(v)
	if v > 0 && s != "0" {
		return "+" + s
	}
	return s
}

func thousands(s string) string {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// ms formats seconds as milliseconds, with decimals by magnitude so that
// a column reads evenly: 0.192 · 4.32 · 14.7 · 250.
func ms(sec float64) string {
	v := sec * 1e3
	if a := math.Abs(v); a > 0 && a < 1 {
		return fmt.Sprintf("%.3f", v)
	}
	return num(v)
}

// gbps formats a bandwidth in Gbit/s: 10, 2.5, 0.1.
func gbps(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }

// mib formats bytes as MiB.
func mib(b float64) string { return num(b / (1 << 20)) }

// pct formats a fraction as a percentage.
func pct(f float64) string { return fmt.Sprintf("%.1f%%", f*100) }
