package nn_test

import (
	"fmt"

	"github.com/shoalml/shoal/nn"
)

func Example() {
	// A two-class problem on 2×2 "images": is the top row brighter?
	m, err := nn.New(nn.Spec{Arch: "mlp", Hidden: []int{16}, Height: 2, Width: 2, Classes: 2}, nn.NewCPU())
	if err != nil {
		panic(err)
	}
	fmt.Println(m.Name()+":", m.Layout())

	x := []float32{
		1, 1, 0, 0,
		0, 0, 1, 1,
		0.9, 0.7, 0.1, 0,
		0.2, 0, 0.8, 1,
	}
	labels := []int32{1, 0, 1, 0}

	params := make([]float32, m.Layout().Size()) // the model owns no parameters
	grads := make([]float32, len(params))
	m.Init(params, 1)
	first, _ := m.ForwardBackward(params, grads, x, labels)
	var loss float64
	var correct int
	for range 100 {
		loss, correct = m.ForwardBackward(params, grads, x, labels)
		for i, g := range grads {
			params[i] -= 0.5 * g
		}
	}
	fmt.Println("loss fell tenfold:", loss < first/10)
	fmt.Println("correct:", correct, "of", len(labels))
	// Output:
	// mlp: fc1.weight[16 4] fc1.bias[16] fc2.weight[2 16] fc2.bias[2]
	// loss fell tenfold: true
	// correct: 4 of 4
}
