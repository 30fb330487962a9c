// Package rpc adapts Shoal's cores to gRPC: the ParameterServer service over
// a ps.Server (RegisterPS), the mapping of core errors to gRPC status codes,
// a server constructor that registers the standard health service and
// server reflection (NewGRPCServer; so grpcurl and grpc_health_probe work),
// and Serve, which serves until its context ends and then drains.
// ShardServer assembles all of it for one shard process: the stream
// budget, the limits, the health service, serving until its context ends
// or a checkpoint fails, the drain and the final checkpoint.
//
// Tensors never take a protobuf copy: a pull's pieces are sent from the
// shard's snapshot, and an async push-pull's from the shard's own values,
// held while they are sent (shoalpb.TensorOut, ps.ChunkRead.Hold), and a
// push's pieces are decoded from gRPC's buffers straight into the gradient
// (shoalpb.TensorIn) and scanned there, piece by piece; the wire is
// the plain protobuf of ps.proto. PushPull is a push and a pull in one
// call: the push is read whole, checked and applied (or refused, changing
// nothing), then the values after it are streamed back, the push's result
// on the first piece.
//
// A push's header is checked before anything is allocated: the plan, the
// worker id, the worker's session (ps.Server.CheckSession: only the
// caller that joined as the worker pushes for it, and a lane without the
// session touches no push in progress), then the ranges. A pull as a
// worker is admitted by ps.Server.CheckPull.
//
// Only this package maps errors to codes: ps.ErrInvalidArgument →
// InvalidArgument, ps.ErrWrongPlan → FailedPrecondition, ps.ErrNoSession →
// FailedPrecondition with reason NO_SESSION (the client binds the worker
// again), ps.ErrWrongSession → PermissionDenied, ps.ErrStale →
// Aborted, ps.ErrJournal → Unavailable (the shard stops; its restart takes
// the push again), a canceled context → Canceled (also while waiting for
// other workers), and ps.ErrWaitTimeout or an expired context →
// DeadlineExceeded.
//
// Example (example_test.go) serves a shard and drains it.
package rpc
