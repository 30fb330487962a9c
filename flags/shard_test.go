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
