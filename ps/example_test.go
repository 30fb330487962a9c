package ps_test

import (
	"context"
	"fmt"

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
	"github.com/shoalml/shoal/ps"
	"github.com/shoalml/shoal/shard"
)

// Shard 0 of a vector of 8 floats split over two servers in chunks of 2:
// it owns every other chunk, serves reads of them, admits a worker, and
// applies its gradient for all of them with plain SGD.
func Example() {
	var l nn.Layout
	l.Add("w", 8)
	plan, err := shard.New(l.Size(), 2, 2*4)
	if err != nil {
		panic(err)
	}
	opt := optim.DefaultConfig()
	opt.LR = 0.5
	initial := []float32{0, 1, 2, 3, 4, 5, 6, 7}
	s, err := ps.New(ps.Config{Mode: consistency.Async, Shard: 0, Plan: plan, Layout: l, Optimizer: opt}, initial)
	if err != nil {
		panic(err)
	}
	fmt.Println("owns", s.Ranges())

	second := s.Ranges()[1]
	dst := make([]float32, second.Len)
	clock, err := s.Read(second, dst)
	if err != nil {
		panic(err)
	}
	fmt.Println("read", second, dst, "at clock", clock)

	// A worker joins first: the shard names its first step and binds the
	// worker id to it with a session, which each of its pushes carries.
	// A push carries the gradient of every owned chunk, concatenated.
	joined, err := s.Join(1, 0, 1)
	if err != nil {
		panic(err)
	}
	res, err := s.Push(context.Background(), ps.Push{WorkerID: 1, Session: joined.Session, Step: joined.Step, Clock: clock, Ranges: s.Ranges(), Grads: []float32{1, 1, 2, 2}})
	if err != nil {
		panic(err)
	}
	if _, err := s.Read(second, dst); err != nil {
		panic(err)
	}
	fmt.Println("after the push", second, dst, "at clock", res.Clock)
	// Output:
	// owns [[0,2) [4,6)]
	// read [4,6) [4 5] at clock 0
	// after the push [4,6) [3 4] at clock 1
}
