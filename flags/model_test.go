package flags_test

import (
	"flag"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/flags"
)

// --model takes the harness's names (shoal bench train --models): they
// set --model, --hidden and --batch, and a flag given on the command line
// wins over the name's.
func TestExpandHarnessModel(t *testing.T) {
	for _, tc := range []struct {
		name, arch, hidden string
		args               []string
		batch              int
	}{
		{"big", "mlp", "16384,768", []string{"--model", "big"}, 16},
		{"big with its batch", "mlp", "16384,768", []string{"--model", "big", "--batch", "64"}, 64},
		{"big-6m", "mlp", "4096,768", []string{"--model", "big-6m"}, 16},
		{"mlp-25m, hidden given", "mlp", "32", []string{"--hidden", "32", "--model", "mlp-25m"}, 16},
		{"mlp as it was", "mlp", "256,128", []string{"--model", "mlp"}, 8},
		{"cnn as it was", "cnn", "256,128", []string{"--model", "cnn"}, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			var m flags.Model
			m.Register(fs)
			batch := fs.Int("batch", 8, "")
			require.NoError(t, fs.Parse(tc.args))
			require.NoError(t, flags.ExpandHarnessModel(fs))
			assert.Equal(t, tc.arch, m.Arch)
			assert.Equal(t, tc.hidden, m.Hidden)
			assert.Equal(t, tc.batch, *batch)
			_, err := m.Spec()
			assert.NoError(t, err)
		})
	}
}
