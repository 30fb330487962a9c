package data_test

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/shoalml/shoal/data"
)

// One rank of two, two epochs of a small synthetic set, then an in-order
// pass over the test set.
func Example() {
	cfg := data.DefaultSyntheticConfig()
	cfg.Train, cfg.Test = 1000, 300
	train, test, err := data.Synthetic(cfg)
	if err != nil {
		panic(err)
	}
	s, err := data.NewSampler(train.Len(), 1, 2, 42, true) // rank 1 of 2
	if err != nil {
		panic(err)
	}
	ld, err := data.NewLoader(data.LoaderConfig{Batch: 64, Depth: 2}, train, s)
	if err != nil {
		panic(err)
	}
	defer ld.Close()

	ctx := context.Background()
	for epoch := range 2 {
		if err := ld.Start(ctx, epoch); err != nil {
			panic(err)
		}
		samples := 0
		for {
			b, err := ld.Next(ctx)
			if errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				panic(err)
			}
			samples += b.Len() // forward and backward on b.X, b.Y here
			ld.Release(b)
		}
		fmt.Printf("epoch %d: %d samples in %d steps\n", epoch, samples, ld.Steps())
	}

	evaluated := 0
	for b := range data.Batches(test, 128) {
		evaluated += b.Len()
	}
	fmt.Println("evaluated", evaluated)
	// Output:
	// epoch 0: 500 samples in 8 steps
	// epoch 1: 500 samples in 8 steps
	// evaluated 300
}

// Fashion-MNIST from where the dataset-fashion-mnist package installs it
// (not run here: the machine may not have it).
func ExampleLoadFashionMNIST() {
	train, test, err := data.LoadFashionMNIST(data.DefaultFashionMNISTDir)
	if err != nil {
		fmt.Println(err) // says where it looked and how to install the data
		return
	}
	fmt.Println(train.Name(), train.Len(), "training and", test.Len(), "test samples")
}
