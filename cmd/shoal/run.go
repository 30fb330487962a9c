package main

import (
	"context"
	"fmt"
	"io"

	"github.com/shoalml/shoal/flags"
	"github.com/shoalml/shoal/launch"
)

const runSynopsis = `Runs N copies of PROGRAM on this machine as ranks 0..N-1, as horovodrun -np N does
(this host only: there is no -H). Usage: shoal run -np N [flags] [--] PROGRAM [ARGS...]

Each rank's environment says where it stands: SHOAL_RANK, SHOAL_WORLD_SIZE,
SHOAL_LOCAL_RANK, SHOAL_LOCAL_SIZE, SHOAL_MASTER (the ring's rendezvous, a free
loopback port), SHOAL_JOB_ID and SHOAL_MODE; in the parameter-server modes also
SHOAL_SERVERS (the shards, which start first) and SHOAL_PS_INIT (the file rank 0
writes the initial weights to), and SHOAL_LOCAL_STEPS with --local-steps; SHOAL_TLS_CA, SHOAL_TLS_CERT, SHOAL_TLS_KEY and
SHOAL_AUTH_TOKEN_FILE where their flags are given. Every line a rank prints comes
out prefixed with it, "[1]<stdout>:". Ctrl-C sends every rank SIGTERM (SIGKILL 5s
later); the first rank to fail stops the others, and shoal run exits with its status.`

// runRun runs a program's ranks (shoal run), and exits as the first of
// them to fail did.
func runRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags.NewFlagSet("run", runSynopsis, stderr)
	var j flags.Job
	j.Register(fs)
	if err := flags.ParseOnly(fs, args); err != nil {
		return err
	}
	cfg, err := j.Config(fs, stdout, stderr)
	if err != nil {
		return err
	}
	if err := launch.RunProgram(ctx, cfg); err != nil {
		fmt.Fprintln(stderr, "shoal run:", err)
		return reported{err}
	}
	return nil
}
