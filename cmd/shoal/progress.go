package main

import (
	"io"
	"os"

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

// progressTo is how one worker process shows its progress: as events for
// the launcher (events), else on a board of its own on out.
func progressTo(out io.Writer, events bool) func(worker.Progress) {
	if events {
		return func(p worker.Progress) { launch.Emit(out, launch.ProgressEvent(p)) }
	}
	return launch.OwnBoard(out, isTerminal(out))
}
