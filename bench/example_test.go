package bench_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/shoalml/shoal/bench"
)

// A results.json turned into report.md and the plots it embeds, as `shoal
// bench train` writes them at the end of a run.
func Example() {
	dir, err := os.MkdirTemp("", "bench-report")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	r, err := bench.Load("testdata/results.json")
	if err != nil {
		panic(err)
	}
	plots, err := bench.WritePlots(dir, r)
	if err != nil {
		panic(err)
	}
	f, err := os.Create(filepath.Join(dir, "report.md"))
	if err != nil {
		panic(err)
	}
	defer f.Close()
	if err := bench.WriteReport(f, r, plots); err != nil {
		panic(err)
	}

	report, err := os.ReadFile(f.Name())
	if err != nil {
		panic(err)
	}
	embedded := 0
	for _, p := range plots {
		if strings.Contains(string(report), "("+p+")") {
			embedded++
		}
	}
	fmt.Println("the report embeds every plot:", len(plots) > 0 && embedded == len(plots))
	// Output: the report embeds every plot: true
}
