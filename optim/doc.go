// Package optim implements the optimizers of Shoal — SGD, momentum, Nesterov momentum, Adagrad
// and Adam, with coupled L2 weight decay and learning-rate schedules — as loops over flat
// float32 slices.
//
// The same code runs on a parameter-server shard (one Optimizer per chunk of the parameter
// vector, its state living with the chunk) and on a worker in ring mode (one Optimizer for the
// whole vector). The updates follow torch.optim's single-tensor implementations operation by
// operation, in float32 with the bias-correction and learning-rate factors in float64, so that
// Shoal's results can be compared with PyTorch's to float32 tolerance. Every platform computes
// bit-identical updates (no fused multiply-add).
//
// # Concurrency
//
// An Optimizer is not safe for concurrent use: the caller serialises Step, State and Restore
// (a server shard holds the chunk's lock across them). Distinct Optimizers share nothing.
// Config, Schedule and their methods are plain values and safe anywhere.
//
// # Ownership
//
// Step updates params in place and only reads grads; it retains neither, and does not allocate.
// State returns a deep copy that the caller owns; Restore copies from its argument and does not
// retain it.
//
// # Example
//
//	cfg := optim.DefaultConfig()
//	cfg.Algorithm = optim.Adam
//	cfg.LR = 1e-3
//	cfg.Schedule = optim.Schedule{WarmupSteps: 500, Decay: optim.DecayCosine, DecaySteps: 10_000}
//	opt, err := optim.New(cfg, len(params))
//	if err != nil {
//		return err
//	}
//	for batch := range batches {
//		backward(batch, params, grads) // fills grads
//		if err := opt.Step(params, grads); err != nil {
//			return err
//		}
//	}
//	ckpt := opt.State() // write ckpt.Steps and ckpt.Slots beside the parameters
package optim
