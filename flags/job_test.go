package flags

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/launch"
)

// parseJob parses args as shoal run's, and builds the run's config.
func parseJob(t *testing.T, args ...string) (*Job, launch.ProgramConfig, error) {
	t.Helper()
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var j Job
	j.Register(fs)
	if err := ParseOnly(fs, args); err != nil {
		return nil, launch.ProgramConfig{}, err
	}
	cfg, err := j.Config(fs, io.Discard, io.Discard)
	return &j, cfg, err
}

// TestJobServerArgs: a shard of shoal run is shoal ps for the run's ranks
// and mode, with the shard flags and credentials given, the optimizer
// that adds each rank's update as it is, and the file of initial weights
// last; the argv parses as shoal ps's flags.
func TestJobServerArgs(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(token, []byte("0123456789abcdef0123456789abcdef\n"), 0o600))
	j, cfg, err := parseJob(t, "-np", "3", "--mode", "sync", "--servers", "2", "--backup-workers", "1", "--checkpoint-dir", dir,
		"--checkpoint-every", "7", "--journal", "--auth-token-file", token, "python3", "train.py", "--lr", "0.1")
	require.NoError(t, err)
	assert.Equal(t, []string{"python3", "train.py", "--lr", "0.1"}, cfg.Program, "the program's flags are its own")
	assert.Equal(t, 3, cfg.NP)
	assert.Equal(t, consistency.Sync, cfg.Mode)
	assert.Equal(t, 2, cfg.Servers)
	assert.Equal(t, token, cfg.Sec.Token)
	require.NotNil(t, cfg.ServerArgs)

	args := cfg.ServerArgs(1, "127.0.0.1:0", "/run/init")
	assert.Equal(t, args, j.ServerArgs(1, "127.0.0.1:0", "/run/init"), "built in one place")
	require.Equal(t, "ps", args[0])
	assert.Contains(t, args, "--init-from=/run/init")
	for _, want := range []string{"--shard=1", "--servers=2", "--listen=127.0.0.1:0", "--workers=3", "--mode=sync", "--events=true",
		"--optimizer=sgd", "--lr=1", "--momentum=0", "--backup-workers=1", "--checkpoint-dir=" + dir, "--checkpoint-every=7",
		"--journal=true", "--auth-token-file=" + token} {
		assert.Contains(t, args, want)
	}

	var p PS
	fs := flag.NewFlagSet("ps", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	p.Register(fs)
	require.NoError(t, fs.Parse(args[1:]))
	assert.Equal(t, "/run/init", p.InitFrom)
	assert.Equal(t, 1, p.Index)
	assert.Equal(t, "sync", p.Mode)
	assert.Equal(t, 3, p.Workers)
	assert.Equal(t, j.Shard, p.Shard)
	assert.Equal(t, Opt{Name: "sgd", LR: 1, Momentum: 0, Decay: "none", Gamma: 0.1}, p.Opt)
	assert.Equal(t, token, p.Sec.Files.Token)
}

// TestJobConfig: what shoal run refuses, saying why, and the ring it
// builds by default.
func TestJobConfig(t *testing.T) {
	_, cfg, err := parseJob(t, "-np", "2", "sh", "-c", "echo $SHOAL_RANK")
	require.NoError(t, err)
	assert.Equal(t, consistency.Ring, cfg.Mode, "ring by default, as horovodrun")
	assert.Zero(t, cfg.Servers)
	assert.Nil(t, cfg.ServerArgs)
	assert.Equal(t, []string{"sh", "-c", "echo $SHOAL_RANK"}, cfg.Program)

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no -np", []string{"python3", "train.py"}, "-np 0: want the number of ranks to start, >= 1"},
		{"a negative -np", []string{"-np", "-1", "python3"}, "-np -1: want the number of ranks to start, >= 1"},
		{"no program", []string{"-np", "2"}, "no program to run: give it after the flags"},
		{"no program after --", []string{"-np", "2", "--"}, "no program to run"},
		{"an unknown mode", []string{"-np", "2", "--mode", "gossip", "python3"}, `--mode "gossip": unknown (want async, sync, ssp or ring)`},
		{"servers in a ring", []string{"-np", "2", "--servers", "2", "--staleness", "3", "python3"},
			"--servers, --staleness: for the parameter-server modes (async, sync, ssp); --mode ring has no servers and would ignore it: leave it out"},
		{"no server", []string{"-np", "2", "--mode", "async", "--servers", "0", "python3"}, "--servers 0: want >= 1"},
		{"a journal nowhere", []string{"-np", "2", "--mode", "sync", "--journal", "python3"}, "--journal: needs --checkpoint-dir"},
		{"a token file that is not there", []string{"-np", "2", "--auth-token-file", "/nonexistent/token", "python3"}, "/nonexistent/token"},
		{"no startup time", []string{"-np", "2", "--startup-timeout", "0s", "python3"}, "--startup-timeout 0s: want > 0"},
		{"local steps in a ring", []string{"-np", "2", "--local-steps", "4", "python3"}, "--local-steps 4: for --mode sync or async (the shards apply the pseudo-gradients), have --mode ring"},
		{"local steps in ssp", []string{"-np", "2", "--mode", "ssp", "--local-steps", "4", "python3"}, "--local-steps 4: for --mode sync or async"},
		{"negative local steps", []string{"-np", "2", "--mode", "sync", "--local-steps", "-1", "python3"}, "--local-steps -1: want 1.."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := parseJob(t, tc.args...)
			assert.ErrorContains(t, err, tc.want)
		})
	}
}

// TestJobLocalSteps: --local-steps H reaches the ranks (SHOAL_LOCAL_STEPS,
// through cfg.LocalSteps) and the shards (--local-steps H with the outer
// optimizer given, in place of the SGD at lr 1 that adds updates).
func TestJobLocalSteps(t *testing.T) {
	j, cfg, err := parseJob(t, "-np", "2", "--mode", "sync", "--local-steps", "10", "--outer-lr", "0.5", "python3", "train.py")
	require.NoError(t, err)
	assert.Equal(t, 10, cfg.LocalSteps)
	args := j.ServerArgs(0, "127.0.0.1:0", "/run/init")
	for _, want := range []string{"--local-steps=10", "--outer-optimizer=nesterov", "--outer-lr=0.5", "--outer-momentum=0.9"} {
		assert.Contains(t, args, want)
	}
	_, cfg, err = parseJob(t, "-np", "2", "--mode", "sync", "python3", "train.py")
	require.NoError(t, err)
	assert.Zero(t, cfg.LocalSteps, "a push every step by default")
}

// TestJobCompression: --compression reaches the ranks (SHOAL_COMPRESSION,
// through cfg.Compression) in the PS modes, int8 only with --local-steps,
// and is refused in a ring, where the program's DistributedOptimizer says
// it; --outer-delay reaches the shards.
func TestJobCompression(t *testing.T) {
	cases := []struct {
		name  string
		args  []string
		want  string
		error string
	}{
		{"default", []string{"--mode", "sync"}, "none", ""},
		{"bf16", []string{"--mode", "async", "--compression", "bf16"}, "bf16", ""},
		{"int8 with local steps", []string{"--mode", "sync", "--local-steps", "10", "--compression", "int8"}, "int8", ""},
		{"int8 without", []string{"--mode", "sync", "--compression", "int8"}, "", "--compression int8: for pseudo-gradients only (--local-steps H)"},
		{"unknown", []string{"--mode", "sync", "--compression", "int4"}, "", `--compression: unknown compression "int4"`},
		{"in a ring", []string{"--compression", "fp16"}, "", "--compression fp16: for the pushes of the parameter-server modes; in a ring the program's DistributedOptimizer says it"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, cfg, err := parseJob(t, append(append([]string{"-np", "2"}, tc.args...), "python3", "train.py")...)
			if tc.error != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.error)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, cfg.Compression)
		})
	}
	j, _, err := parseJob(t, "-np", "4", "--mode", "async", "--local-steps", "10", "--outer-optimizer", "delayed-nesterov", "--outer-delay", "4", "python3", "train.py")
	require.NoError(t, err)
	args := j.ServerArgs(0, "127.0.0.1:0", "/run/init")
	assert.Contains(t, args, "--outer-optimizer=delayed-nesterov")
	assert.Contains(t, args, "--outer-delay=4")
}

// TestJobRefusesTheServersOptimizer: every optimizer flag is refused,
// saying why, whatever its value.
func TestJobRefusesTheServersOptimizer(t *testing.T) {
	var o Opt
	var names []string
	visit(func(fs *flag.FlagSet) { o.Register(fs, "none") }, func(fl *flag.Flag) { names = append(names, fl.Name) })
	require.Contains(t, names, "lr")
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			fs := flag.NewFlagSet("run", flag.ContinueOnError)
			var out strings.Builder
			fs.SetOutput(&out)
			var j Job
			j.Register(fs)
			err := ParseOnly(fs, []string{"-np", "2", "--" + name, "1", "python3"})
			require.True(t, errors.Is(err, ErrUsage), "%v", err)
			assert.Contains(t, out.String(), "--"+name+": the shards add the update each rank's own optimizer computed (sgd, lr 1, momentum 0): set the optimizer in PROGRAM")
		})
	}
}
