package main

import (
	"flag"
	"fmt"
	"slices"
	"strings"

	"github.com/shoalml/shoal/gpu"
	"github.com/shoalml/shoal/nn"
)

// deviceFlags choose where a worker computes and in what: --device and
// --precision.
type deviceFlags struct {
	choice    gpu.Choice
	precision nn.Precision
}

func (d *deviceFlags) register(fs *flag.FlagSet) {
	fs.Var(&d.choice, "device", "where the model computes: auto (the GPU of the worker's local rank, modulo the GPUs found, else the CPU), cpu, cuda (the local rank's GPU; an error without one) or cuda:N")
	fs.Var(&d.precision, "precision", "what a GPU's GEMMs multiply: fp32, bf16 (bfloat16 copies of the operands, on the tensor cores) or fp16 (float16, the loss scaled dynamically); weights, updates and the gradients sent stay fp32. bf16 and fp16 need a GPU")
}

func (d *deviceFlags) args() []string {
	return []string{"--device", d.choice.String(), "--precision", d.precision.String()}
}

// place says where the worker of localRank computes (gpu.Choice.Resolve
// with the CUDA driver's device count); mixed precision placed on the CPU
// is an error.
func (d *deviceFlags) place(localRank int) (gpu.Placement, error) {
	p, err := d.choice.Resolve(localRank, gpu.Count)
	if err == nil && d.precision.Half() && !p.OnGPU() {
		err = fmt.Errorf("--precision %s: mixed precision runs on a GPU, but --device %s computes on the CPU (%s); use --precision fp32 there", d.precision, d.choice, p.Why)
	}
	return p, err
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
		return d.onGPU(spec, p)
	}
	// Why this BLAS is shoal info's to say.
	be, _ := nn.NewBestCPU(threads)
	m, err := nn.New(spec, be)
	if err != nil {
		return placedModel{}, err
	}
	return placedModel{model: m, where: be.Name(), why: p.Why, close: func() {}}, nil
}

// onGPU opens GPU p.Ordinal and builds the model in its memory, computing
// in d's precision.
func (d *deviceFlags) onGPU(spec nn.Spec, p gpu.Placement) (placedModel, error) {
	dev, err := gpu.NewDevice(p.Ordinal)
	if err != nil {
		return placedModel{}, fmt.Errorf("--device %s: cuda:%d: %w", d.choice, p.Ordinal, err)
	}
	m, err := nn.NewOnDevice(spec, dev)
	if err == nil {
		err = m.SetPrecision(d.precision)
	}
	if err != nil {
		if m != nil {
			m.Close()
		}
		dev.Close()
		return placedModel{}, fmt.Errorf("--device %s: %w", d.choice, err)
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
