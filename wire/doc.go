// Package wire is how Shoal writes tensors on the wire: float32 vectors as
// little-endian float32, IEEE 754 float16 or bfloat16 (Encoding), and the
// size limits of the messages that carry them (MaxPieceBytes,
// MaxMessageBytes). The parameter-server client and server (packages
// client and rpc, through shoalpb's tensor codec) and the collectives
// (package collective) all encode with it, so a push, a pull and an
// allreduce segment agree byte for byte. It imports nothing from Shoal.
//
// Encoding to a 16-bit format rounds to nearest, ties to even; values too
// large become ±Inf, NaN stays NaN (quieted), and Float16 keeps subnormals
// as IEEE 754 does. Decoding is exact. Int8, for the pseudo-gradients of
// local steps, is symmetric int8 with a float32 scale per Int8Block values
// (PutInt8, DecodeInt8): each value comes back within half its block's
// scale. On little-endian hosts
// (NativeLittleEndian) a []float32's memory already is its float32 wire
// form: Float32Bytes gives it without a copy.
//
// Concurrency: everything here is a pure function of its arguments; calls
// may run concurrently on distinct buffers.
//
// Ownership: buffers are the caller's. Put, Decode and Quantize write only
// into the slices they are given and keep none; Append allocates only when
// dst lacks the capacity; Float32Bytes aliases its argument.
//
// Example (example_test.go) sends a gradient as float16 and reads it
// back.
package wire
