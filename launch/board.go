package launch

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/shoalml/shoal/worker"
)

// Board aggregates the progress of several workers and prints one line per
// epoch, once every live worker has finished it; on a terminal it also
// redraws a progress bar of the epoch in progress. It is used from one
// goroutine.
type Board struct {
	out     io.Writer
	tty     bool
	workers int
	latest  map[int]worker.Progress         // per rank, its newest report
	done    map[int]map[int]worker.Progress // epoch → rank → last report
	dead    map[int]bool
	next    int // the first epoch not printed yet
	drawn   bool
	lastBar time.Time
	// Epochs holds the summary line of each finished epoch.
	Epochs []EpochSummary
}

// EpochSummary is one finished epoch over the live workers: the mean loss
// and accuracy of their samples, their samples/s and the slowest one's time.
type EpochSummary struct {
	Epoch, Epochs  int
	Loss, Accuracy float64
	SamplesPerSec  float64
	Seconds        float64
}

// NewBoard returns a board of workers ranks printing on out (tty: with
// a progress bar redrawn in place).
func NewBoard(out io.Writer, workers int, tty bool) *Board {
	return &Board{out: out, tty: tty, workers: workers, latest: map[int]worker.Progress{}, done: map[int]map[int]worker.Progress{}, dead: map[int]bool{}}
}

// OwnBoard is how one worker process shows its own progress (under
// mpirun, srun, or by hand): a board of one rank, its reports counted as
// that rank's whatever the worker's rank in its job. (A board of one
// rank waits for rank 0's epochs: rank 1's bar stayed at 100% for the
// whole run, its epochs never printed.)
func OwnBoard(out io.Writer, tty bool) func(worker.Progress) {
	b := NewBoard(out, 1, tty)
	return func(p worker.Progress) {
		p.Rank = 0
		b.Update(p)
	}
}

// Update takes a worker's progress report.
func (b *Board) Update(p worker.Progress) {
	b.latest[p.Rank] = p
	if p.EpochDone {
		if b.done[p.Epoch] == nil {
			b.done[p.Epoch] = map[int]worker.Progress{}
		}
		b.done[p.Epoch][p.Rank] = p
	}
	b.flush()
	if b.tty && time.Since(b.lastBar) > 100*time.Millisecond {
		b.drawBar()
	}
}

// MarkDead stops waiting for rank's reports.
func (b *Board) MarkDead(rank int) {
	b.dead[rank] = true
	b.flush()
}

// ranksDone reports whether every live rank finished epoch e.
func (b *Board) ranksDone(e int) bool {
	any := false
	for r := range b.workers {
		if b.dead[r] {
			continue
		}
		if _, ok := b.done[e][r]; !ok {
			return false
		}
		any = true
	}
	return any
}

func (b *Board) flush() {
	for b.ranksDone(b.next) {
		var samples, correct int
		var loss, secs float64
		epochs := 0
		for _, p := range b.done[b.next] {
			samples += p.Samples
			correct += p.Correct
			loss += p.LossSum
			secs = max(secs, p.Elapsed.Seconds())
			epochs = p.Epochs
		}
		s := EpochSummary{Epoch: b.next + 1, Epochs: epochs, Loss: loss / float64(max(samples, 1)),
			Accuracy: float64(correct) / float64(max(samples, 1)), SamplesPerSec: float64(samples) / max(secs, 1e-9), Seconds: secs}
		b.Epochs = append(b.Epochs, s)
		b.ClearBar()
		fmt.Fprintf(b.out, "epoch %d/%d  loss %.4f  accuracy %6.2f%%  %8.0f samples/s  %6.1fs\n", s.Epoch, s.Epochs, s.Loss, 100*s.Accuracy, s.SamplesPerSec, s.Seconds)
		delete(b.done, b.next)
		b.next++
	}
}

// ClearBar erases the progress bar, if drawn, before a line is printed.
func (b *Board) ClearBar() {
	if b.drawn {
		fmt.Fprint(b.out, "\r\033[K")
		b.drawn = false
	}
}

// drawBar redraws the bar of epoch b.next: the steps all ranks did in it.
func (b *Board) drawBar() {
	var steps, total, samples, correct int
	var loss float64
	var elapsed time.Duration
	epochs := 0
	for r, p := range b.latest {
		if b.dead[r] {
			continue
		}
		epochs = p.Epochs
		switch {
		case p.Epoch == b.next:
			elapsed = max(elapsed, p.Elapsed)
			steps += p.Step
			total += p.EpochSteps
			samples += p.Samples
			correct += p.Correct
			loss += p.LossSum
		case p.Epoch > b.next:
			if d, ok := b.done[b.next][r]; ok {
				steps += d.EpochSteps
				total += d.EpochSteps
			}
		}
	}
	if total == 0 {
		return
	}
	const width = 30
	frac := float64(steps) / float64(total)
	fill := int(frac * width)
	bar := strings.Repeat("=", fill) + strings.Repeat(" ", width-fill)
	eta := "?"
	if steps > 0 {
		eta = (time.Duration(float64(elapsed) * (1 - frac) / frac)).Round(time.Second).String()
	}
	fmt.Fprintf(b.out, "\r\033[Kepoch %d/%d [%s] %3.0f%%  loss %.4f  accuracy %6.2f%%  epoch ends in %s", b.next+1, epochs, bar, 100*frac,
		loss/float64(max(samples, 1)), 100*float64(correct)/float64(max(samples, 1)), eta)
	b.drawn = true
	b.lastBar = time.Now()
}
