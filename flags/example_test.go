package flags_test

import (
	"fmt"
	"io"
	"strings"

	"github.com/shoalml/shoal/flags"
)

// A command registers a role's contract and parses its arguments; a
// launcher fills a default contract and renders it as a child's argv.
func Example() {
	fs := flags.NewFlagSet("worker", "Runs one training worker.", io.Discard)
	var w flags.Worker
	w.Register(fs)
	if err := flags.Parse(fs, []string{"--lanes", "2", "--mode", "sync"}); err != nil {
		fmt.Println(err)
		return
	}

	child := flags.DefaultWorker()
	child.Calls, child.Train = w.Calls, w.Train
	child.Ranks.Rank, child.Events = 3, true
	for _, a := range child.Args() {
		for _, name := range []string{"--events=", "--lanes=", "--mode=", "--rank="} {
			if strings.HasPrefix(a, name) {
				fmt.Println(a)
			}
		}
	}
	// Output:
	// --events=true
	// --lanes=2
	// --mode=sync
	// --rank=3
}
