package flags

import (
	"flag"
	"fmt"
	"slices"
	"strings"

	"github.com/shoalml/shoal/gpu"
	"github.com/shoalml/shoal/nn"
)

// Device chooses where a worker computes and in what: --device,
// --precision and --cuda-graphs.
type Device struct {
	Choice    gpu.Choice
	Precision nn.Precision
	Graphs    bool
}

// Register adds the flags to fs.
func (d *Device) Register(fs *flag.FlagSet) {
	d.Choice, _ = gpu.ParseChoice("auto") // as --device auto parses, so that a rendered default parses back equal
	fs.Var(&d.Choice, "device", SectionCompute.Usage("where the model computes: auto (the GPU of the worker's local rank, modulo the GPUs found, else the CPU), cpu, cuda (the local rank's GPU; an error without one) or cuda:N"))
	fs.BoolVar(&d.Graphs, "cuda-graphs", true, SectionCompute.Usage("on a GPU, capture each step once as a CUDA graph and replay it (one launch for its kernels, GEMMs and copies); false launches them one by one"))
	fs.Var(&d.Precision, "precision", SectionCompute.Usage("what a GPU's GEMMs multiply: fp32, bf16 (bfloat16 copies of the operands, on the tensor cores) or fp16 (float16, the loss scaled dynamically); weights, updates and the gradients sent stay fp32. bf16 and fp16 need a GPU"))
}

// Place says where the worker of localRank computes (gpu.Choice.Resolve
// with the CUDA driver's device count); mixed precision placed on the CPU
// is an error.
func (d *Device) Place(localRank int) (gpu.Placement, error) {
	p, err := d.Choice.Resolve(localRank, gpu.Count)
	if err == nil && d.Precision.Half() && !p.OnGPU() {
		err = fmt.Errorf("--precision %s: mixed precision runs on a GPU, but --device %s computes on the CPU (%s); use --precision fp32 there", d.Precision, d.Choice, p.Why)
	}
	return p, err
}

// Placed is a model on its device, what to call the device in a log
// line, and how to free both.
type Placed struct {
	Model nn.Model
	Where string // "cuda:0 NVIDIA H100 80GB HBM3 (sm_90)" or the CPU backend
	Why   string
	Close func()
}

// Build returns model's for the worker of localRank: on the GPU d
// places it on, else on the fastest CPU backend here with threads GEMM
// threads. A GPU that is found but cannot be opened is an error, not a
// quiet fall back to the CPU.
func (d *Device) Build(model *Model, localRank, threads int) (Placed, error) {
	p, err := d.Place(localRank)
	if err != nil {
		return Placed{}, err
	}
	spec, err := model.Spec()
	if err != nil {
		return Placed{}, err
	}
	if p.OnGPU() {
		return d.OnGPU(spec, p)
	}
	// Why this BLAS is shoal info's to say.
	be, _ := nn.NewBestCPU(threads)
	m, err := nn.New(spec, be)
	if err != nil {
		return Placed{}, err
	}
	return Placed{Model: m, Where: be.Name(), Why: p.Why, Close: func() {}}, nil
}

// OnGPU opens GPU p.Ordinal and builds the model in its memory, computing
// in d's precision.
func (d *Device) OnGPU(spec nn.Spec, p gpu.Placement) (Placed, error) {
	dev, err := gpu.NewDevice(p.Ordinal)
	if err != nil {
		return Placed{}, fmt.Errorf("--device %s: cuda:%d: %w", d.Choice, p.Ordinal, err)
	}
	m, err := nn.NewOnDevice(spec, dev)
	if err == nil {
		err = m.SetPrecision(d.Precision)
		m.SetGraphs(d.Graphs, nil)
	}
	if err != nil {
		if m != nil {
			m.Close()
		}
		dev.Close()
		return Placed{}, fmt.Errorf("--device %s: %w", d.Choice, err)
	}
	return Placed{Model: m, Where: dev.Name(), Why: p.Why,
		Close: func() { m.Close(); dev.Close() }}, nil
}

// CheckResident refuses --device-resident (resident) where d places any
// of the workers of local ranks 0..n-1 on the CPU, whose weights are in
// host memory already.
func (d *Device) CheckResident(resident bool, n int) error {
	if !resident {
		return nil
	}
	for r := range n {
		p, err := d.Place(r)
		if err != nil {
			return err
		}
		if !p.OnGPU() {
			return fmt.Errorf("--device-resident: keeps the weights on a GPU, but --device %s places worker %d on the CPU (%s): use --device cuda, or leave it out", d.Choice, r, p.Why)
		}
	}
	return nil
}

// DescribePlacement says in a few words where workers 0..n-1 (local ranks
// 0..n-1 of this machine) compute, e.g. "the CPU" or "cuda:0, cuda:1".
func (d *Device) DescribePlacement(n int) (string, error) {
	var devs []string
	for r := range n {
		p, err := d.Place(r)
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
