package gpu

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"testing"
)

func TestParseChoice(t *testing.T) {
	for _, s := range []string{"auto", "cpu", "cuda", "cuda:0", "cuda:3"} {
		c, err := ParseChoice(s)
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		if c.String() != s {
			t.Errorf("%q reads back as %q", s, c)
		}
	}
	for _, s := range []string{"gpu", "cuda:", "cuda:-1", "cuda:x", "CUDA", "cuda0", "cpu:0"} {
		_, err := ParseChoice(s)
		if err == nil || !strings.Contains(err.Error(), "want auto, cpu, cuda or cuda:N") {
			t.Errorf("%q: err %v, want the accepted spellings", s, err)
		}
	}
	if (Choice{}).String() != "auto" {
		t.Errorf("zero Choice is %q, want auto", Choice{})
	}
}

func TestChoiceIsAFlag(t *testing.T) {
	var c Choice
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Var(&c, "device", "")
	if err := fs.Parse([]string{"--device", "cuda:1"}); err != nil {
		t.Fatal(err)
	}
	if !c.CUDA || c.Ordinal != 1 {
		t.Errorf("--device cuda:1 gave %+v", c)
	}
	if err := fs.Parse([]string{"--device", "tpu"}); err == nil {
		t.Error("--device tpu accepted")
	}
}

func TestResolve(t *testing.T) {
	gpus := func(n int) func() (int, error) { return func() (int, error) { return n, nil } }
	missing := func() (int, error) {
		return 0, fmt.Errorf("%w: libcuda.so.1 not found\ntried: /a\ntried: /b", ErrUnavailable)
	}
	must := func(s string) Choice {
		c, err := ParseChoice(s)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	cases := []struct {
		choice string
		rank   int
		count  func() (int, error)
		want   int // ordinal, -1 CPU
		why    string
	}{
		{"cpu", 3, gpus(2), -1, "--device cpu"},
		{"auto", 0, gpus(2), 0, "local rank 0 of 2 GPU(s) gets cuda:0"},
		{"auto", 3, gpus(2), 1, "local rank 3 of 2 GPU(s) gets cuda:1"},
		{"auto", 1, gpus(0), -1, "the CUDA driver reports 0 devices"},
		{"auto", 1, missing, -1, "no usable GPU, so the CPU: gpu: CUDA is not available: libcuda.so.1 not found"},
		{"auto", 1, func() (int, error) { return 0, errors.New("no usable library; tried:\n  /x: gone") }, -1, "the CPU: no usable library"},
		{"cuda", 5, gpus(4), 1, "local rank 5 of 4 GPU(s) gets cuda:1"},
		{"cuda:1", 0, gpus(2), 1, "--device cuda:1"},
	}
	for _, c := range cases {
		p, err := must(c.choice).Resolve(c.rank, c.count)
		if err != nil {
			t.Errorf("%s rank %d: %v", c.choice, c.rank, err)
			continue
		}
		if p.Ordinal != c.want || p.OnGPU() != (c.want >= 0) || !strings.Contains(p.Why, c.why) {
			t.Errorf("%s rank %d: %+v, want ordinal %d and why containing %q", c.choice, c.rank, p, c.want, c.why)
		}
		if strings.Contains(p.Why, "\n") {
			t.Errorf("%s: why spans lines: %q", c.choice, p.Why)
		}
	}
	// The zero Choice is auto: it must not pin GPU 0.
	if p, _ := (Choice{}).Resolve(1, gpus(2)); p.Ordinal != 1 {
		t.Errorf("zero Choice, rank 1 of 2 GPUs: cuda:%d, want cuda:1", p.Ordinal)
	}

	fails := []struct {
		choice string
		count  func() (int, error)
		target error
		msg    string
	}{
		{"cuda", gpus(0), ErrNoGPU, "--device cuda: no GPU found"},
		{"cuda", missing, ErrUnavailable, "libcuda.so.1 not found"},
		{"cuda:2", gpus(2), ErrNoGPU, "2 CUDA device(s), cuda:0 to cuda:1"},
	}
	for _, f := range fails {
		_, err := must(f.choice).Resolve(0, f.count)
		if !errors.Is(err, f.target) || !strings.Contains(err.Error(), f.msg) {
			t.Errorf("%s: err %v, want %v containing %q", f.choice, err, f.target, f.msg)
		}
	}
	if _, err := must("cuda").Resolve(-1, gpus(1)); err == nil {
		t.Error("local rank -1 accepted")
	}
}
