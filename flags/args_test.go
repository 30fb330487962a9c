package flags

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// registerer is a flag group or role contract.
type registerer interface{ Register(*flag.FlagSet) }

// parseBack parses args into in, renders in with args, and parses that
// into out: out must then equal in.
func parseBack(t *testing.T, args []string, in, out registerer, render func() []string) {
	t.Helper()
	fs := flag.NewFlagSet("in", flag.ContinueOnError)
	in.Register(fs)
	require.NoError(t, fs.Parse(args))
	back := flag.NewFlagSet("out", flag.ContinueOnError)
	back.SetOutput(io.Discard)
	out.Register(back)
	require.NoError(t, back.Parse(render()))
	assert.Equal(t, in, out)
}

// TestRoleArgsParseBack: the argv a launcher renders from a role's
// contract (Worker, PS) parses, in a flag set of the same contract, back
// into the same values, whatever was set.
func TestRoleArgsParseBack(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"the defaults", nil},
		{"some of every group", []string{"--model", "cnn", "--hidden", "8,4", "--seed", "7", "--lr", "0.125", "--lr-decay", "cosine",
			"--log-level", "debug", "--stall-warning", "2s", "--nic-gbps", "2.5", "--rtt", "1ms", "--tls-ca", "/tmp/a b/ca.pem", "--gossip-addr", "127.0.0.1:0",
			"--join", "h:1,h:2", "--metrics-addr", "127.0.0.1:0", "--timeline", "/tmp/t.json", "--servers", "3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var wIn, wOut Worker
			parseBack(t, tc.args, &wIn, &wOut, wIn.Args)
			var pIn, pOut PS
			parseBack(t, tc.args, &pIn, &pOut, pIn.Args)
		})
	}
}

// TestWorkerArgsTakeTheLaunchersValues: a worker rendered from
// DefaultWorker carries what the launcher set, and the defaults
// otherwise.
func TestWorkerArgsTakeTheLaunchersValues(t *testing.T) {
	w := DefaultWorker()
	w.Ranks.Rank, w.Threads, w.Events, w.Calls.Lanes = 3, 2, true, 4
	args := w.Args()
	assert.Contains(t, args, "--rank=3")
	assert.Contains(t, args, "--threads=2")
	assert.Contains(t, args, "--events=true")
	assert.Contains(t, args, "--lanes=4")
	assert.Contains(t, args, "--servers=localhost:7070")
	assert.Contains(t, args, "--world-size=-1")
	assert.Contains(t, args, "--mode=", "a mode not given goes on not given: the worker takes its servers'")
	w.Train.ModeName, w.Train.ModeGiven = "sync", true
	assert.Contains(t, w.Args(), "--mode=sync")
}

// TestTrainKnowsWhetherTheModeWasGiven: --mode unset is async and not
// given; given, even as async, it is the user's.
func TestTrainKnowsWhetherTheModeWasGiven(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		given bool
	}{{nil, false}, {[]string{"--mode", "async"}, true}, {[]string{"--mode=sync"}, true}, {[]string{"--mode="}, false}} {
		var tr Train
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		tr.Register(fs)
		require.NoError(t, fs.Parse(tc.args))
		require.NoError(t, tr.Validate())
		assert.Equal(t, tc.given, tr.ModeGiven, "%v", tc.args)
		if !tc.given {
			assert.Equal(t, "async", tr.Mode.String(), "%v: the default", tc.args)
		}
	}
}

func TestAMisspeltFlagGetsTheNearestName(t *testing.T) {
	for _, tc := range []struct{ arg, want string }{
		{"--epoch", "did you mean --epochs?"},
		{"--wokers", "did you mean --workers?"},
		{"--bogus", ""},
	} {
		var out strings.Builder
		fs := NewFlagSet("train", "Trains.", &out)
		fs.Int("epochs", 3, "")
		fs.Int("workers", 2, "")
		fs.Int("steps", 0, "")
		err := Parse(fs, []string{tc.arg, "1"})
		require.ErrorIs(t, err, ErrUsage)
		assert.Contains(t, out.String(), "flag provided but not defined: "+tc.arg[1:])
		assert.Contains(t, out.String(), "shoal train -h lists every flag")
		assert.NotContains(t, out.String(), "Usage:", "a mistake gets a line, not the whole list")
		if tc.want == "" {
			assert.NotContains(t, out.String(), "did you mean", tc.arg)
		} else {
			assert.Contains(t, out.String(), tc.want)
		}
	}
	var out strings.Builder
	fs := NewFlagSet("train", "Trains.", &out)
	fs.Int("epochs", 3, "")
	require.ErrorIs(t, Parse(fs, []string{"-h"}), flag.ErrHelp)
	assert.Contains(t, out.String(), "Usage: shoal train [flags]")
}
