// Package rpc adapts Shoal's cores to gRPC: the ParameterServer service over
// a ps.Server, the mapping of core errors to gRPC status codes, and a server
// constructor that registers the standard health service and server
// reflection (so grpcurl and grpc_health_probe work).
//
// Only this package maps errors to codes: ps.ErrInvalidArgument →
// InvalidArgument, ps.ErrWrongPlan → FailedPrecondition, a canceled or
// expired context → Canceled / DeadlineExceeded.
//
//	g := rpc.NewGRPCServer(logger)
//	rpc.RegisterPS(g, core)
//	go g.Serve(lis)
package rpc
