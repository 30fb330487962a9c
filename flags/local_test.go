package flags

import (
	"flag"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// parseTrain parses args as the workers' Train group and validates it.
func parseTrain(t *testing.T, args ...string) (Train, error) {
	t.Helper()
	fs := flag.NewFlagSet("train", flag.ContinueOnError)
	fs.SetOutput(new(strings.Builder))
	var tr Train
	tr.Register(fs)
	require.NoError(t, fs.Parse(args))
	return tr, tr.Validate()
}

// TestFragmentsFlags: --fragments F goes with --local-steps H in sync and
// async, F a divisor of H; its overlap defaults to 1 where there are two
// or more steps between exchanges, and everything else is refused saying
// what was expected.
func TestFragmentsFlags(t *testing.T) {
	cases := []struct {
		name    string
		args    []string
		overlap int // with no error
		err     string
	}{
		{"sync", []string{"--mode", "sync", "--local-steps", "10", "--fragments", "5"}, 1, ""},
		{"async", []string{"--mode", "async", "--local-steps", "10", "--fragments", "2"}, 1, ""},
		{"one a step", []string{"--mode", "sync", "--local-steps", "4", "--fragments", "4"}, 0, ""},
		{"one", []string{"--mode", "sync", "--local-steps", "4", "--fragments", "1", "--fragment-overlap", "0"}, 0, ""},
		{"overlap given", []string{"--mode", "sync", "--local-steps", "12", "--fragments", "2", "--fragment-overlap", "3"}, 3, ""},
		{"without local steps", []string{"--mode", "sync", "--fragments", "2"}, 0, "--fragments 2: fragments are synchronised every --local-steps H steps, and there are no local steps: give --local-steps"},
		{"ring", []string{"--mode", "ring", "--fragments", "2"}, 0, "--fragments 2: for --mode sync or async with --local-steps"},
		{"ring with local steps", []string{"--mode", "ring", "--local-steps", "4", "--fragments", "2"}, 0, "--fragments 2: for --mode sync or async with --local-steps"},
		{"more than H", []string{"--mode", "sync", "--local-steps", "4", "--fragments", "8"}, 0, "--fragments 8 with --local-steps 4: want a divisor of 4"},
		{"not a divisor", []string{"--mode", "sync", "--local-steps", "10", "--fragments", "3"}, 0, "want a divisor of 10"},
		{"negative", []string{"--mode", "sync", "--local-steps", "10", "--fragments", "-1"}, 0, "--fragments -1: want 1.."},
		{"overlap too long", []string{"--mode", "sync", "--local-steps", "10", "--fragments", "5", "--fragment-overlap", "2"}, 0, "--fragment-overlap 2: want 0..1"},
		{"mix", []string{"--mode", "sync", "--local-steps", "10", "--fragments", "5", "--fragment-mix", "2"}, 0, "--fragment-mix 2: want 0..1"},
		{"host aggregate", []string{"--mode", "sync", "--local-steps", "10", "--fragments", "5", "--host-aggregate"}, 0, "--fragments 5 with --host-aggregate"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := parseTrain(t, tc.args...)
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.overlap, tr.LocalSteps.OverlapSteps())
		})
	}
}

// TestShardFragments: shoal ps takes --fragments alone, carries it to
// the shard's config, and cuts its chunks small enough for each shard to
// own a piece of every fragment.
func TestShardFragments(t *testing.T) {
	fs := flag.NewFlagSet("ps", flag.ContinueOnError)
	fs.SetOutput(new(strings.Builder))
	p := DefaultPS()
	p.Register(fs)
	assert.Nil(t, fs.Lookup("fragment-overlap"), "the workers' flag")
	require.NotNil(t, fs.Lookup("fragments"))
	p.LocalSteps.H, p.LocalSteps.F, p.Mode = 10, 5, "sync"
	args := p.Args()
	assert.Contains(t, args, "--fragments=5")
}
