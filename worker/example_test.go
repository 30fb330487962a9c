package worker_test

import (
	"context"
	"fmt"

	"github.com/shoalml/shoal/client"
	"github.com/shoalml/shoal/data"
	"github.com/shoalml/shoal/internal/testcluster"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/worker"
	"github.com/shoalml/shoal/worker/psclient"
)

// One worker trains a small MLP through two parameter-server shards,
// served here in this process on loopback, with Downpour SGD (Async):
// each step pushes the batch's gradient and brings back the next step's
// weights in one round trip. Then the final weights are pulled and
// evaluated on the test set.
func Example() {
	model, err := nn.New(nn.Spec{Arch: "mlp", Hidden: []int{32}}, nn.NewCPU())
	if err != nil {
		panic(err)
	}
	dcfg := data.DefaultSyntheticConfig()
	dcfg.Train, dcfg.Test = 1200, 400
	train, test, err := data.Synthetic(dcfg)
	if err != nil {
		panic(err)
	}
	initial := make([]float32, model.Layout().Size())
	model.Init(initial, 1)
	cores, err := testcluster.NewCoresFor(model.Layout(), initial, 2, 4096, 0.05) // plain SGD
	if err != nil {
		panic(err)
	}
	servers, err := testcluster.ServeTCP(cores...)
	if err != nil {
		panic(err)
	}
	defer servers.Close()

	ctx := context.Background()
	ps, err := client.Dial(ctx, servers.Addrs())
	if err != nil {
		panic(err)
	}
	defer ps.Close()
	s, err := worker.NewAsync(psclient.New(ps), model.Layout().Size(), ps.Info().Plan.Servers, worker.AsyncConfig{WorkerID: 0})
	if err != nil {
		panic(err)
	}
	w, err := worker.New(worker.Config{WorldSize: 1, Batch: 32, Epochs: 2, Seed: 1}, model, train, s)
	if err != nil {
		panic(err)
	}
	defer w.Close()
	res, err := w.Run(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Steps, "steps of", res.Samples, "samples")

	params := w.Params()
	if _, err := ps.Pull(ctx, params); err != nil {
		panic(err)
	}
	ev, err := worker.Evaluate(ctx, model, params, test, 100)
	if err != nil {
		panic(err)
	}
	fmt.Println("test accuracy above 80%:", ev.Accuracy > 0.8)
	// Output:
	// 76 steps of 2400 samples
	// test accuracy above 80%: true
}
