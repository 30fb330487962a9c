package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/shoalml/shoal/launch"
	"github.com/shoalml/shoal/worker"
)

// isTerminal reports whether w is a terminal (progress bars) or not
// (plain lines).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// board aggregates the progress of several workers and prints one line per
// epoch, once every live worker has finished it; on a terminal it also
// redraws a progress bar of the epoch in progress. It is used from one
// goroutine.
type board struct {
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
	Epochs []epochSummary
}

type epochSummary struct {
	Epoch, Epochs  int
	Loss, Accuracy float64
	SamplesPerSec  float64
	Seconds        float64
}

// progressTo is how one worker process shows its progress: as events for
// the launcher (events), else on a board of its own on out.
func progressTo(out io.Writer, events bool) func(worker.Progress) {
	if events {
		return func(p worker.Progress) { launch.Emit(out, launch.ProgressEvent(p)) }
	}
	return newBoard(out, 1, isTerminal(out)).update
}

func newBoard(out io.Writer, workers int, tty bool) *board {
	return &board{out: out, tty: tty, workers: workers, latest: map[int]worker.Progress{}, done: map[int]map[int]worker.Progress{}, dead: map[int]bool{}}
}

func (b *board) update(p worker.Progress) {
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

// markDead stops waiting for rank's reports.
func (b *board) markDead(rank int) {
	b.dead[rank] = true
	b.flush()
}

// ranksDone reports whether every live rank finished epoch e.
func (b *board) ranksDone(e int) bool {
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

func (b *board) flush() {
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
		s := epochSummary{Epoch: b.next + 1, Epochs: epochs, Loss: loss / float64(max(samples, 1)),
			Accuracy: float64(correct) / float64(max(samples, 1)), SamplesPerSec: float64(samples) / max(secs, 1e-9), Seconds: secs}
		b.Epochs = append(b.Epochs, s)
		b.clearBar()
		fmt.Fprintf(b.out, "epoch %d/%d  loss %.4f  accuracy %6.2f%%  %8.0f samples/s  %6.1fs\n", s.Epoch, s.Epochs, s.Loss, 100*s.Accuracy, s.SamplesPerSec, s.Seconds)
		delete(b.done, b.next)
		b.next++
	}
}

func (b *board) clearBar() {
	if b.drawn {
		fmt.Fprint(b.out, "\r\033[K")
		b.drawn = false
	}
}

// drawBar redraws the bar of epoch b.next: the steps all ranks did in it.
func (b *board) drawBar() {
	var steps, total, samples, correct int
	var loss float64
	epochs := 0
	for r, p := range b.latest {
		if b.dead[r] {
			continue
		}
		epochs = p.Epochs
		switch {
		case p.Epoch == b.next:
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
	fmt.Fprintf(b.out, "\r\033[Kepoch %d/%d [%s] %3.0f%%  loss %.4f  accuracy %6.2f%%", b.next+1, epochs, bar, 100*frac,
		loss/float64(max(samples, 1)), 100*float64(correct)/float64(max(samples, 1)))
	b.drawn = true
	b.lastBar = time.Now()
}
