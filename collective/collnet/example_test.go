package collnet_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/shoalml/shoal/collective"
	"github.com/shoalml/shoal/collective/collnet"
)

// Two ranks form a group, here goroutines of one process on loopback: in
// a job each rank is a process, given its rank and the master address by
// its launcher. Rank 0 serves the rendezvous on a listener of its own and
// tells rank 1 its address; the ranks then sum a vector with a
// Communicator over the transport Connect returns.
func Example() {
	lis, err := collnet.ListenMaster("127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	master := lis.Addr().String()
	sums := make([][]float32, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for rank := range 2 {
		wg.Go(func() {
			cfg := collnet.DefaultConfig()
			cfg.Rank, cfg.Size = rank, 2
			cfg.Master = master // rank 0 serves it, rank 1 dials it
			if rank == 0 {
				cfg.MasterListener = lis
			}
			cfg.Listen = "127.0.0.1:0"
			cfg.JobID = "example"
			cfg.SharedMemory = true // the ranks share a host
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			tr, err := collnet.Connect(ctx, cfg)
			if err != nil {
				errs[rank] = err
				return
			}
			defer tr.Close()
			c, err := collective.New(tr, collective.DefaultConfig())
			if err != nil {
				errs[rank] = err
				return
			}
			v := []float32{float32(rank), 10}
			errs[rank] = c.Allreduce(ctx, v, collective.Sum)
			sums[rank] = v
		})
	}
	wg.Wait()
	fmt.Println(sums, errs)
	// Output: [[1 20] [1 20]] [<nil> <nil>]
}
