// Package data feeds training: in-memory labelled image datasets
// (Fashion-MNIST read from its idx files, or a generated synthetic set),
// the Sampler that shards each epoch across ranks the way PyTorch's
// DistributedSampler does, and the Loader that gathers batches ahead of
// the training loop.
//
// # Datasets
//
// LoadFashionMNIST reads the four idx files, plain or gzipped, from a
// directory (DefaultFashionMNISTDir where the dataset-fashion-mnist package
// puts them). Pixels stay uint8 in memory and become float32 on Gather,
// normalized by default as (p/255 − 0.2860)/0.3530, Fashion-MNIST's
// training mean and standard deviation (NormalizeUnit gives p/255). The
// idx parser (ReadIDX) takes an io.Reader, checks every header field
// against the data actually present before trusting it, and is fuzzed.
// Synthetic generates a learnable set (a random template per class plus
// Gaussian noise) deterministically from a seed, for tests and for users
// without the data (--dataset synthetic).
//
// # Sharding
//
// A Sampler gives rank r of world the positions r, r+world, … of one
// seeded permutation per epoch, padded to a multiple of world. When world
// divides the dataset size, the world ranks' k-th batches of b samples are
// together exactly the k-th batch of N·b samples of a single-rank sampler
// with the same seed: the property that lets the synchronous modes be
// checked against one worker (see Sampler for which positions a batch
// covers).
//
// # Concurrency and ownership
//
// Datasets and Samplers are immutable and safe for concurrent use.
// Dataset.Gather writes into buffers the caller owns and keeps none. A
// Loader owns one goroutine per epoch, started by Start and stopped, and
// waited for, by the next Start, by the cancellation of Start's context,
// or by Close; it fills a fixed pool of Depth+1 batch buffers, so a warm
// loop allocates nothing. A *Batch belongs to the caller from Next until
// Release. Start, Next and Close are called from one goroutine; Release
// from any.
//
// # Example
//
// Example (example_test.go) feeds two epochs of one rank of two and then
// the test set in order; ExampleLoadFashionMNIST loads the real data.
package data
