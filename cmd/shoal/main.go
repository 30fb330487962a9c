// Command shoal is Shoal's one binary: parameter servers, workers, the
// one-machine launcher and the tools around them.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/shoalml/shoal/flags"
	"github.com/shoalml/shoal/machine"
)

func main() {
	// The first SIGINT or SIGTERM cancels ctx: servers drain, workers
	// stop their run cleanly. A second one ends the process at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop)
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) && !errors.Is(err, errUsage) && !errors.As(err, new(reported)) {
			fmt.Fprintln(os.Stderr, "shoal:", err)
		}
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(exitCode(err))
	}
}

// errUsage marks a command-line mistake already explained on stderr.
var errUsage = flags.ErrUsage

// reported is an error its command has printed already.
type reported struct{ error }

func (r reported) Unwrap() error { return r.error }

func exitCode(err error) int {
	if errors.Is(err, errUsage) {
		return 2
	}
	var status interface{ ExitCode() int } // shoal run: the failed rank's
	if errors.As(err, &status) {
		return status.ExitCode()
	}
	if errors.Is(err, context.Canceled) {
		return 130
	}
	return 1
}

const usage = `Shoal trains a model data-parallel across many workers.

Usage:
  shoal <command> [flags]

Commands:
  train     train on this machine: start servers and workers as processes on loopback
  run       run N copies of a program (a PyTorch script) as ranks on this machine, as horovodrun -np N
  ps        run one parameter-server shard
  worker    run one training worker (parameter servers or ring allreduce)
  bench     benchmarks: collective bandwidth between local processes, one worker's compute
  health    ask a server's gRPC health service whether it serves (exit 0 if so)
  certs     write a throwaway CA, a node certificate and a token for a test cluster
  info      print the build, the GEMM path (OpenBLAS or gonum), thread settings and GPU driver
  version   print the version

Run 'shoal <command> -h' for the flags of a command.
`

// run runs the command args name, with its standard streams: stdin is read
// only by a worker under a launcher (--events), for control lines.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errUsage
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "train":
		return runTrain(ctx, rest, stdout, stderr)
	case "run":
		return runRun(ctx, rest, stdout, stderr)
	case "ps":
		return runPS(ctx, rest, stdout, stderr)
	case "worker":
		return runWorker(ctx, rest, stdin, stdout, stderr)
	case "bench":
		return runBench(ctx, rest, stdout, stderr)
	case "info":
		return runInfo(ctx, rest, stdout, stderr)
	case "health":
		return runHealth(ctx, rest, stdout, stderr)
	case "certs":
		return runCerts(rest, stdout, stderr)
	case "version", "--version", "-version":
		return runVersion(stdout)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprintf(stderr, "shoal: unknown command %q\n\n%s", cmd, usage)
	return errUsage
}

func runVersion(stdout io.Writer) error {
	_, err := fmt.Fprintln(stdout, machine.ReadBuild())
	return err
}

// printJSONLine writes v to w as one line of JSON.
func printJSONLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}
