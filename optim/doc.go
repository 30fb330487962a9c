// Package optim implements the optimizers of Shoal — SGD, momentum, Nesterov momentum, Adagrad
// and Adam, with coupled L2 weight decay, AdamW with decoupled weight decay, delayed Nesterov
// momentum for a server applying many workers' updates as they arrive (Liu et al. 2024), and
// learning-rate schedules — as loops over flat float32 slices.
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
// ExampleOptimizer (example_test.go) minimises a parabola with Nesterov
// momentum, ExampleSchedule_LRAt prints a warm-up and cosine decay, and
// ExampleOptimizer_State checkpoints Adam and resumes it.
package optim
