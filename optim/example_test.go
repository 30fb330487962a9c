package optim_test

import (
	"fmt"

	"github.com/shoalml/shoal/optim"
)

// Minimise f(x) = (x − 3)² with Nesterov momentum.
func ExampleOptimizer() {
	cfg := optim.DefaultConfig()
	cfg.Algorithm = optim.Nesterov
	cfg.LR = 0.05
	opt, err := optim.New(cfg, 1)
	if err != nil {
		panic(err)
	}
	x := []float32{0}
	grad := make([]float32, 1)
	for range 200 {
		grad[0] = 2 * (x[0] - 3)
		if err := opt.Step(x, grad); err != nil {
			panic(err)
		}
	}
	fmt.Printf("x = %.4f after %d steps\n", x[0], opt.Steps())
	// Output: x = 3.0000 after 200 steps
}

func ExampleSchedule_LRAt() {
	s := optim.Schedule{WarmupSteps: 4, Decay: optim.DecayCosine, DecaySteps: 4, MinLR: 0.01}
	for step := range int64(10) {
		fmt.Printf("%.4f ", s.LRAt(0.1, step))
	}
	fmt.Println()
	// Output: 0.0250 0.0500 0.0750 0.1000 0.1000 0.0868 0.0550 0.0232 0.0100 0.0100
}

// A checkpoint of Adam with a warm-up: State copies the step count and the
// moment estimates, and an optimizer restored from it takes the same steps
// as the one that went on.
func ExampleOptimizer_State() {
	cfg := optim.DefaultConfig()
	cfg.Algorithm = optim.Adam
	cfg.LR = 1e-2
	cfg.Schedule = optim.Schedule{WarmupSteps: 5, Decay: optim.DecayCosine, DecaySteps: 100}
	step := func(opt *optim.Optimizer, x []float32) {
		grad := []float32{2 * (x[0] - 3)}
		if err := opt.Step(x, grad); err != nil {
			panic(err)
		}
	}
	opt, err := optim.New(cfg, 1)
	if err != nil {
		panic(err)
	}
	x := []float32{0}
	for range 10 {
		step(opt, x)
	}
	ckpt := opt.State() // saved beside the parameters
	resumed := []float32{x[0]}

	restored, err := optim.New(cfg, 1)
	if err != nil {
		panic(err)
	}
	if err := restored.Restore(ckpt); err != nil {
		panic(err)
	}
	for range 10 {
		step(opt, x)
		step(restored, resumed)
	}
	fmt.Println(ckpt.Steps, opt.SlotNames(), "resumed identically:", x[0] == resumed[0])
	// Output: 10 [exp_avg exp_avg_sq] resumed identically: true
}
