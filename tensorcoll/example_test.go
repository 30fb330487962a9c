package tensorcoll_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"sync"

	"github.com/shoalml/shoal/collective"
	"github.com/shoalml/shoal/tensorcoll"
)

// Two ranks (goroutines over an in-memory transport) average a float32
// vector held as raw little-endian bytes, as a tensor's memory would be.
func Example() {
	trs := collective.NewMemGroup(2)
	var wg sync.WaitGroup
	out := make([][]byte, 2)
	for rank, tr := range trs {
		wg.Go(func() {
			cfg := tensorcoll.DefaultConfig()
			cfg.Rank, cfg.Size = rank, 2
			s, err := tensorcoll.New(tr, cfg)
			if err != nil {
				panic(err)
			}
			defer s.Close()
			data := make([]byte, 8)
			binary.LittleEndian.PutUint32(data, math.Float32bits(float32(rank+1)))
			binary.LittleEndian.PutUint32(data[4:], math.Float32bits(float32(10*(rank+1))))
			if _, err := s.Do(context.Background(), tensorcoll.Request{Kind: tensorcoll.KindAllreduce, Name: "x", Data: data,
				DType: tensorcoll.Float32, Op: tensorcoll.Average}); err != nil {
				panic(err)
			}
			out[rank] = data
		})
	}
	wg.Wait()
	for rank, d := range out {
		fmt.Println(rank, math.Float32frombits(binary.LittleEndian.Uint32(d)), math.Float32frombits(binary.LittleEndian.Uint32(d[4:])))
	}
	// Output:
	// 0 1.5 15
	// 1 1.5 15
}
