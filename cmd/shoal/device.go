package main

import (
	"flag"
	"fmt"
	"slices"
	"strings"

	"github.com/shoalml/shoal/gpu"
	"github.com/shoalml/shoal/nn"
)

// deviceFlags choose where a worker computes: --device.
type deviceFlags struct{ choice gpu.Choice }

func (d *deviceFlags) register(fs *flag.FlagSet) {
	fs.Var(&d.choice, "device", "where the model computes: auto (the GPU of the worker's local rank, modulo the GPUs found, else the CPU), cpu, cuda (the local rank's GPU; an error without one) or cuda:N")
}

func (d *deviceFlags) args() []string { return []string{"--device", d.choice.String()} }

// place says where the worker of localRank computes (gpu.Choice.Resolve
// with the CUDA driver's device count).
func (d *deviceFlags) place(localRank int) (gpu.Placement, error) {
	return d.choice.Resolve(localRank, gpu.Count)
}

// placedModel is a model on its device, what to call the device in a log
// line, and how to free both.
type placedModel struct {
	model nn.Model
	where string // "cuda:0 NVIDIA H100 80GB HBM3 (sm_90)" or the CPU backend
	why   string
	close func()
}

// build returns mf's model for the worker of localRank: on the GPU d
// places it on, else on the fastest CPU backend here with threads GEMM
// threads. A GPU that is found but cannot be opened is an error, not a
// quiet fall back to the CPU.
func (d *deviceFlags) build(mf *modelFlags, localRank, threads int) (placedModel, error) {
	p, err := d.place(localRank)
	if err != nil {
		return placedModel{}, err
	}
	spec, err := mf.spec()
	if err != nil {
		return placedModel{}, err
	}
	if p.OnGPU() {
		return onGPU(spec, p, d.choice)
	}
	// Why this BLAS is shoal info's to say.
	be, _ := nn.NewBestCPU(threads)
	m, err := nn.New(spec, be)
	if err != nil {
		return placedModel{}, err
	}
	return placedModel{model: m, where: be.Name(), why: p.Why, close: func() {}}, nil
}

// onGPU opens GPU p.Ordinal and builds the model in its memory.
func onGPU(spec nn.Spec, p gpu.Placement, choice gpu.Choice) (placedModel, error) {
	dev, err := gpu.NewDevice(p.Ordinal)
	if err != nil {
		return placedModel{}, fmt.Errorf("--device %s: cuda:%d: %w", choice, p.Ordinal, err)
	}
	m, err := nn.NewOnDevice(spec, dev)
	if err != nil {
		dev.Close()
		return placedModel{}, fmt.Errorf("--device %s: %w", choice, err)
	}
	return placedModel{model: m, where: dev.Name(), why: p.Why,
		close: func() { m.Close(); dev.Close() }}, nil
}

// describePlacement says in a few words where workers 0..n-1 (local ranks
// 0..n-1 of this machine) compute, e.g. "the CPU" or "cuda:0, cuda:1".
func (d *deviceFlags) describePlacement(n int) (string, error) {
	var devs []string
	for r := range n {
		p, err := d.place(r)
		if err != nil {
			return "", err
		}
		s := "the CPU"
		if p.OnGPU() {
			s = fmt.Sprintf("cuda:%d", p.Ordinal)
		}
		if !slices.Contains(devs, s) {
			devs = append(devs, s)
		}
	}
	return strings.Join(devs, ", "), nil
}
