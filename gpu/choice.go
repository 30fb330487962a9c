package gpu

import (
	"fmt"
	"strconv"
	"strings"
)

// Choice is a --device value: "auto", "cpu", "cuda" (the GPU of the
// worker's local rank) or "cuda:N" (GPU N). It is a flag.Value; the zero
// Choice is "auto".
type Choice struct {
	// CPU is set by "cpu".
	CPU bool
	// CUDA is set by "cuda" and "cuda:N".
	CUDA bool
	// Ordinal is N of "cuda:N", else -1 (by local rank).
	Ordinal int
}

// ParseChoice reads a --device value.
func ParseChoice(s string) (Choice, error) {
	switch s {
	case "auto", "":
		return Choice{Ordinal: -1}, nil
	case "cpu":
		return Choice{CPU: true, Ordinal: -1}, nil
	case "cuda":
		return Choice{CUDA: true, Ordinal: -1}, nil
	}
	if n, ok := strings.CutPrefix(s, "cuda:"); ok {
		i, err := strconv.Atoi(n)
		if err == nil && i >= 0 {
			return Choice{CUDA: true, Ordinal: i}, nil
		}
	}
	return Choice{}, fmt.Errorf("device %q: want auto, cpu, cuda or cuda:N with N >= 0", s)
}

// String returns the flag's spelling.
func (c Choice) String() string {
	switch {
	case c.CPU:
		return "cpu"
	case c.CUDA && c.Ordinal >= 0:
		return "cuda:" + strconv.Itoa(c.Ordinal)
	case c.CUDA:
		return "cuda"
	}
	return "auto"
}

// Set parses s into c (flag.Value).
func (c *Choice) Set(s string) error {
	v, err := ParseChoice(s)
	if err != nil {
		return err
	}
	*c = v
	return nil
}

// Placement is where a worker computes: the CPU (Ordinal -1) or CUDA
// device Ordinal, and why, in words for its log.
type Placement struct {
	Ordinal int
	Why     string
}

// OnGPU says whether the placement is a CUDA device.
func (p Placement) OnGPU() bool { return p.Ordinal >= 0 }

// Resolve places the worker of localRank: "cpu" on the CPU; "cuda:N" on
// GPU N; "cuda" on GPU localRank modulo the number of GPUs; "auto" as
// "cuda" when count finds at least one GPU, else on the CPU. count
// returns the number of CUDA devices (Count, but for tests). A choice of
// a GPU that is not there is an error wrapping ErrNoGPU (or count's
// error, such as ErrUnavailable).
func (c Choice) Resolve(localRank int, count func() (int, error)) (Placement, error) {
	if c.CPU {
		return Placement{Ordinal: -1, Why: "--device cpu"}, nil
	}
	n, err := count()
	if err == nil && n < 1 {
		err = fmt.Errorf("%w: the CUDA driver reports 0 devices", ErrNoGPU)
	}
	if err != nil {
		if !c.CUDA {
			return Placement{Ordinal: -1, Why: "--device auto: no usable GPU, so the CPU: " + firstLine(err)}, nil
		}
		return Placement{}, fmt.Errorf("--device %s: %w", c, err)
	}
	if c.CUDA && c.Ordinal >= 0 {
		if c.Ordinal >= n {
			return Placement{}, fmt.Errorf("--device %s: %w: %d CUDA device(s), cuda:0 to cuda:%d", c, ErrNoGPU, n, n-1)
		}
		return Placement{Ordinal: c.Ordinal, Why: fmt.Sprintf("--device %s", c)}, nil
	}
	if localRank < 0 {
		return Placement{}, fmt.Errorf("--device %s: local rank %d: want >= 0", c, localRank)
	}
	return Placement{Ordinal: localRank % n, Why: fmt.Sprintf("--device %s: local rank %d of %d GPU(s) gets cuda:%d", c, localRank, n, localRank%n)}, nil
}

// firstLine returns err's message up to its first newline: a failed
// library search lists every path it tried, one per line, after "tried:".
func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return strings.TrimSuffix(s, "; tried:")
}
