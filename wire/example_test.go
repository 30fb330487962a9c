package wire_test

import (
	"fmt"

	"github.com/shoalml/shoal/wire"
)

// A gradient sent as float16 and read back: half the bytes, each value
// rounded to the nearest half-precision value.
func Example() {
	grads := []float32{1, -0.1, 65504}
	b := wire.Float16.Append(nil, grads)
	got := make([]float32, len(grads))
	if err := wire.Float16.Decode(got, b); err != nil {
		panic(err)
	}
	fmt.Println(len(b), got)
	// Output: 6 [1 -0.099975586 65504]
}
