package flags

import (
	"flag"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
			"--checkpoint-every", "7", "--checkpoint-errors", "warn", "--journal", "--parallel-step=false"}},
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
