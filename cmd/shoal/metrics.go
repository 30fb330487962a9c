package main

import (
	"fmt"

	"github.com/shoalml/shoal/timeline"
)

// closeTimeline closes w, adding its error to err's.
func closeTimeline(w *timeline.Writer, err *error) {
	if cerr := w.Close(); cerr != nil && *err == nil {
		*err = fmt.Errorf("--timeline: %w", cerr)
	}
}
