package flags

import (
	"flag"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRoleFlagsHaveSections: every flag of shoal ps, shoal worker and
// shoal run is declared with a section, so that their help is grouped
// (shoal train's own flags are checked in cmd/shoal).
func TestRoleFlagsHaveSections(t *testing.T) {
	for _, tc := range []struct {
		name string
		reg  func(*flag.FlagSet)
	}{
		{"ps", new(PS).Register},
		{"worker", new(Worker).Register},
		{"run", new(Job).Register},
	} {
		fs := flag.NewFlagSet(tc.name, flag.ContinueOnError)
		tc.reg(fs)
		assert.Empty(t, Unsectioned(fs), "shoal %s: declare these flags with a Section's Usage", tc.name)
	}
}

// TestHelpGroupsFlagsBySection: the help lists the flags under their
// sections' headings, in the sections' order, each flag's text without
// its section and its declared default, whatever was parsed before -h.
func TestHelpGroupsFlagsBySection(t *testing.T) {
	var out strings.Builder
	fs := NewFlagSet("train", "Trains.", &out)
	fs.Int("workers", 2, SectionJob.Usage("number of worker processes"))
	fs.Float64("lr", 0.01, SectionOptimizer.Usage("learning rate"))
	fs.String("log-level", "warn", SectionOutput.Usage("log level"))
	fs.Int("epochs", 3, SectionJob.Usage("epochs to train"))
	require.ErrorIs(t, Parse(fs, []string{"--workers", "5", "-h"}), flag.ErrHelp)
	assert.Equal(t, `Usage: shoal train [flags]

Trains.

The job (its mode, its processes, how long it trains):
  -epochs int
    	epochs to train (default 3)
  -workers int
    	number of worker processes (default 2)

Optimizer:
  -lr float
    	learning rate (default 0.01)

Output and observability:
  -log-level string
    	log level (default "warn")
`, out.String())
}

// TestHelpOfUnsectionedFlagsIsOneList: a command whose flags are not all
// sectioned (shoal bench's, sharing a group's) keeps one list, its texts
// shown without their sections.
func TestHelpOfUnsectionedFlagsIsOneList(t *testing.T) {
	var out strings.Builder
	fs := NewFlagSet("bench plan", "Plans.", &out)
	fs.Int("rounds", 1, "rounds")
	fs.Float64("lr", 0.01, SectionOptimizer.Usage("learning rate"))
	require.ErrorIs(t, Parse(fs, []string{"-h"}), flag.ErrHelp)
	assert.Equal(t, "Usage: shoal bench plan [flags]\n\nPlans.\n\nFlags:\n  -lr float\n    \tlearning rate (default 0.01)\n  -rounds int\n    \trounds (default 1)\n", out.String())
	assert.Equal(t, []string{"rounds"}, Unsectioned(fs))
}

// TestSectionOfAPlainUsage: a usage without a section's mark is its own
// text, of no section; every section's heading is its own.
func TestSectionOfAPlainUsage(t *testing.T) {
	s, text := sectionOf("a plain usage")
	assert.Equal(t, Section(0), s)
	assert.Equal(t, "a plain usage", text)
	seen := map[string]bool{}
	for s := SectionJob; s < numSections; s++ {
		got, text := sectionOf(s.Usage("x"))
		assert.Equal(t, s, got)
		assert.Equal(t, "x", text)
		assert.False(t, seen[s.Heading()], "%d: %s twice", s, s.Heading())
		seen[s.Heading()] = true
	}
}
