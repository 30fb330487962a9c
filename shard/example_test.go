package shard_test

import (
	"fmt"

	"github.com/shoalml/shoal/shard"
)

// A vector of 10 floats over 3 servers in chunks of at most 2 floats: 6
// chunks (5 rounded up to a multiple of 3), four of 2 floats and then two
// of 1, server s owning chunks s and s+3.
func Example() {
	p, err := shard.New(10, 3, 2*4)
	if err != nil {
		panic(err)
	}
	for s := range p.Servers {
		fmt.Println("server", s, "owns", p.Ranges(s), "of", p.Floats(s), "floats")
	}
	// Output:
	// server 0 owns [[0,2) [6,8)] of 4 floats
	// server 1 owns [[2,4) [8,9)] of 3 floats
	// server 2 owns [[4,6) [9,10)] of 3 floats
}
