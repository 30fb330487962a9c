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
