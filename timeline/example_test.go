package timeline_test

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/shoalml/shoal/timeline"
)

// A process's timeline: a span per phase of a step, read back.
func Example() {
	dir, err := os.MkdirTemp("", "timeline")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "worker-0.json")
	w, err := timeline.Create(path, "worker 0", os.Getpid())
	if err != nil {
		panic(err)
	}
	w.Thread(0, "steps")
	start := time.Now()
	w.Span(0, "forward", start, 3*time.Millisecond, timeline.Arg{Key: "step", Val: 0})
	w.Span(0, "backward", start.Add(3*time.Millisecond), 5*time.Millisecond, timeline.Arg{Key: "step", Val: 0})
	if err := w.Close(); err != nil {
		panic(err)
	}
	tr, _, err := timeline.ReadFile(path)
	if err != nil {
		panic(err)
	}
	for _, e := range tr.TraceEvents {
		if e.Ph == "X" {
			fmt.Printf("%s %.0f µs (step %v)\n", e.Name, e.Dur, e.Args["step"])
		}
	}
	// Output:
	// forward 3000 µs (step 0)
	// backward 5000 µs (step 0)
}
