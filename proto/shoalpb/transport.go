package shoalpb

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
)

// Transport sizes gRPC's HTTP/2 transport for multi-megabyte tensor
// streams. The zero value leaves gRPC's defaults (64 KiB windows that grow
// by BDP estimation, 32 KiB read and write buffers).
type Transport struct {
	// StreamWindow and ConnWindow are static flow-control windows in
	// bytes: a sender may have this much unread data in flight on one
	// stream, and on the whole connection, before it waits for the
	// receiver. gRPC uses a window of at least 64 KiB as static, turning
	// off its BDP estimation.
	StreamWindow, ConnWindow int32
	// Buffer is the size of each connection's read and write buffer:
	// how many bytes of frames go to the kernel in one system call.
	Buffer int
	// NoZero takes the buffers gRPC receives messages into from Pool,
	// which does not clear them first (gRPC's default pool does; every
	// byte is overwritten by what is read).
	NoZero bool
}

// DefaultTransport is what Shoal's servers and clients use: windows larger
// than a step of the models Shoal trains on one machine (the 784-512-512-10
// MLP moves 2.7 MB each way), 1 MiB read and write buffers, and receive
// buffers that are not zeroed. Measured lever by lever (docs/BENCHMARKS.md):
// alone on an idle machine, a push-pull is no faster with the windows and
// buffers (its latency is the pipeline of writer and reader, which large
// buffers coarsen); in training, where the cores are busy with compute
// and every system call counts, all three together gave the most samples/s
// (the runs are in docs/BENCHMARKS.md, "Figures that lived in code comments").
var DefaultTransport = Transport{StreamWindow: 16 << 20, ConnWindow: 64 << 20, Buffer: 1 << 20, NoZero: true}

// ServerOptions are t's settings for a gRPC server.
func (t Transport) ServerOptions() []grpc.ServerOption {
	return options(t, grpc.InitialWindowSize, grpc.InitialConnWindowSize, grpc.WriteBufferSize, grpc.ReadBufferSize, experimental.BufferPool)
}

// DialOptions are t's settings for a gRPC client connection.
func (t Transport) DialOptions() []grpc.DialOption {
	return options(t, grpc.WithInitialWindowSize, grpc.WithInitialConnWindowSize, grpc.WithWriteBufferSize, grpc.WithReadBufferSize,
		experimental.WithBufferPool)
}

// options turns t into the options of one side, server or client, given
// that side's constructors.
func options[O any](t Transport, window, connWindow func(int32) O, writeBuf, readBuf func(int) O, pool func(mem.BufferPool) O) []O {
	var o []O
	if t.StreamWindow > 0 {
		o = append(o, window(t.StreamWindow))
	}
	if t.ConnWindow > 0 {
		o = append(o, connWindow(t.ConnWindow))
	}
	if t.Buffer > 0 {
		o = append(o, writeBuf(t.Buffer), readBuf(t.Buffer))
	}
	if t.NoZero {
		o = append(o, pool(Pool))
	}
	return o
}
