package main

import (
	"context"
	"io"

	"github.com/shoalml/shoal/flags"
	"github.com/shoalml/shoal/machine"
)

const infoSynopsis = `Prints how this binary was built and what it will compute with: the GEMM path
(OpenBLAS, loaded at run time, or gonum's pure-Go BLAS, and why), the thread
settings, and the GPUs: the NVIDIA driver and each GPU as NVML reports them, the
CUDA libraries found, and the device --device auto gives each local rank. It
loads every library at run time, so it runs on any machine; without a driver it
says "no NVIDIA driver".`

func runInfo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags.NewFlagSet("info", infoSynopsis, stderr)
	jsonOut := fs.Bool("json", false, "print one JSON object")
	if err := flags.Parse(fs, args); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	r := machine.Gather()
	if *jsonOut {
		return printJSONLine(stdout, r)
	}
	return r.WriteText(stdout)
}
