package flags

import (
	"flag"
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/optim"
	"github.com/shoalml/shoal/ps"
)

// TestShardArgs: a shard's argv built from the group parses, in a flag
// set of the group, back into the same values.
func TestShardArgs(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"the defaults", nil},
		{"every flag", []string{"--servers", "3", "--chunk-bytes", "4096", "--backup-workers", "1", "--staleness", "0", "--checkpoint-dir", "/tmp/c d",
			"--checkpoint-every", "7", "--checkpoint-errors", "warn", "--journal", "--parallel-step=false",
			"--update-rule", "dcasgd", "--dc-lambda", "0.5", "--dc-max-mib", "64"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var in, out Shard
			fs := flag.NewFlagSet("in", flag.ContinueOnError)
			in.Register(fs)
			require.NoError(t, fs.Parse(tc.args))
			back := flag.NewFlagSet("out", flag.ContinueOnError)
			back.SetOutput(io.Discard)
			out.Register(back)
			require.NoError(t, back.Parse(in.Args()))
			assert.Equal(t, in, out)
			assert.Len(t, in.Names(), len(in.Args()))
		})
	}
}

func TestShardUpdateConfig(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want ps.UpdateConfig
		err  string
	}{
		{nil, ps.UpdateConfig{Rule: ps.UpdateAuto, DCLambda: ps.DefaultDCLambda, DCMaxBytes: ps.DefaultDCMaxBytes}, ""},
		{[]string{"--update-rule", "staleness"}, ps.UpdateConfig{Rule: ps.UpdateStaleness, DCLambda: ps.DefaultDCLambda, DCMaxBytes: ps.DefaultDCMaxBytes}, ""},
		{[]string{"--update-rule", "dcasgd", "--dc-lambda", "0.1", "--dc-max-mib", "3"}, ps.UpdateConfig{Rule: ps.UpdateDCASGD, DCLambda: 0.1, DCMaxBytes: 3 << 20}, ""},
		{[]string{"--update-rule", "fast"}, ps.UpdateConfig{}, `--update-rule: update rule "fast": unknown (want auto, full, average, staleness, dcasgd)`},
		{[]string{"--dc-lambda", "-1"}, ps.UpdateConfig{}, "--dc-lambda -1: want a finite value >= 0"},
		{[]string{"--dc-max-mib", "0"}, ps.UpdateConfig{}, "--dc-max-mib 0: want >= 1"},
	} {
		t.Run(fmt.Sprint(tc.args), func(t *testing.T) {
			var f Shard
			fs := flag.NewFlagSet("in", flag.ContinueOnError)
			f.Register(fs)
			require.NoError(t, fs.Parse(tc.args))
			got, err := f.UpdateConfig()
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// TestUpdateNote: shoal train's header names the shards' rule, and warns
// where it is known to be unstable.
func TestUpdateNote(t *testing.T) {
	opt := optim.DefaultConfig()
	opt.Algorithm, opt.LR, opt.Momentum = optim.Momentum, 0.01, 0.9
	for _, tc := range []struct {
		rule    string
		mode    consistency.Mode
		workers int
		note    string
		warns   bool
	}{
		{"auto", consistency.Async, 8, "update rule staleness", false},
		{"auto", consistency.SSP, 8, "update rule average", false},
		{"full", consistency.Async, 8, "update rule full", true},
		{"full", consistency.Async, 2, "update rule full", false},
		{"dcasgd", consistency.SSP, 16, "update rule dcasgd", true},
		{"full", consistency.Sync, 8, "", false},
		{"full", consistency.Ring, 8, "", false},
	} {
		f := Shard{Staleness: 1, Update: Update{Rule: tc.rule, DC: DC{Lambda: 0.04, MaxMiB: 1}}}
		note, warning := f.UpdateNote(tc.mode, tc.workers, opt, 0)
		assert.Equal(t, tc.note, note, "%s %s %d", tc.rule, tc.mode, tc.workers)
		if tc.warns {
			assert.Contains(t, warning, "is known to be unstable", "%s %s %d", tc.rule, tc.mode, tc.workers)
		} else {
			assert.Empty(t, warning, "%s %s %d", tc.rule, tc.mode, tc.workers)
		}
	}
}

// TestShardCheckMode: a shard flag that the mode would ignore is refused
// where it was given, naming the mode that takes it; the defaults, and a
// launcher's rendering of them (--staleness=), pass in every mode.
func TestShardCheckMode(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		mode consistency.Mode
		n    int
		err  string
	}{
		{"the defaults in async", nil, consistency.Async, 2, ""},
		{"the defaults in sync", nil, consistency.Sync, 1, ""},
		{"the defaults in ssp", nil, consistency.SSP, 2, ""},
		{"a bound in ssp", []string{"--staleness", "3"}, consistency.SSP, 2, ""},
		{"a launcher's unset bound in async", []string{"--staleness="}, consistency.Async, 2, ""},
		{"a bound in async", []string{"--staleness", "3"}, consistency.Async, 2,
			"--staleness 3: the bound of --mode ssp; --mode async would ignore it: leave it out, or run --mode ssp"},
		{"the default bound given in async", []string{"--staleness", "1"}, consistency.Async, 2, "--staleness 1: the bound of --mode ssp; --mode async"},
		{"a bound in sync", []string{"--staleness", "0"}, consistency.Sync, 2, "--staleness 0: the bound of --mode ssp; --mode sync would ignore it"},
		{"a negative bound", []string{"--staleness", "-1"}, consistency.SSP, 2, "--staleness -1: want >= 0"},
		{"backups in sync", []string{"--backup-workers", "1"}, consistency.Sync, 2, ""},
		{"backups in async", []string{"--backup-workers", "1"}, consistency.Async, 3,
			"--backup-workers 1: for --mode sync, whose steps wait for the workers but this many; --mode async would ignore it: leave it out, or run --mode sync"},
		{"backups in ssp", []string{"--backup-workers", "1"}, consistency.SSP, 3, "--mode ssp would ignore it"},
		{"as many backups as workers", []string{"--backup-workers", "2"}, consistency.Sync, 2,
			"--backup-workers 2: want fewer than --workers 2 (a step waits for all workers but this many, so for one at least)"},
		{"negative backups", []string{"--backup-workers", "-1"}, consistency.Sync, 2, "--backup-workers -1: want >= 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f Shard
			fs := flag.NewFlagSet("in", flag.ContinueOnError)
			f.Register(fs)
			require.NoError(t, fs.Parse(tc.args))
			err := f.CheckMode(tc.mode, "--workers", tc.n)
			if tc.err == "" {
				assert.NoError(t, err)
			} else {
				assert.ErrorContains(t, err, tc.err)
			}
		})
	}
}

// TestShardArgsKeepAnUnsetBoundUnset: a launcher passes --staleness on
// as not given unless it was, so that its shards refuse only what a
// person gave.
func TestShardArgsKeepAnUnsetBoundUnset(t *testing.T) {
	var in Shard
	fs := flag.NewFlagSet("in", flag.ContinueOnError)
	in.Register(fs)
	require.NoError(t, fs.Parse(nil))
	assert.Contains(t, in.Args(), "--staleness=")
	assert.Equal(t, int64(1), in.Staleness, "unset, the bound is the default")
	require.NoError(t, fs.Parse([]string{"--staleness", "4"}))
	assert.Contains(t, in.Args(), "--staleness=4")
}
