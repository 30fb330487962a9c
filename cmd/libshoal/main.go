//go:build cgo

// Command libshoal is Shoal's collectives as a C library, for runtimes
// that hold tensors in their own memory (PyTorch, through
// clients/python/shoal/torch):
//
//	go build -buildmode=c-shared -o libshoal.so ./cmd/libshoal
//
// The C ABI (libshoal.h, generated beside the .so) is small: shoal_init
// forms the group and returns a session handle; shoal_allreduce,
// shoal_broadcast, shoal_allgather and shoal_barrier queue a collective on
// the caller's memory and return an op id at once; shoal_poll and
// shoal_wait finish it (shoal_wait blocks, so callers should release
// their interpreter lock: Python's ctypes.CDLL does); shoal_result_*
// hand back an allgather's output; shoal_shutdown ends the session. Every
// call that can fail takes an error buffer (err, errlen) and writes a
// NUL-terminated message into it. Pointers handed to a queued op must
// stay valid, and untouched by the caller, until shoal_wait (or
// shoal_poll) says the op is done.
//
// Enumerations (tensorcoll's): dtype 0 float32, 1 float64, 2 float16, 3
// bfloat16, 4 int32, 5 int64, 6 uint8, 7 int8, 8 int16, 9 bool; op 0
// average, 1 sum, 2 adasum, 3 min, 4 max, 5 product; compression 0 none,
// 1 float16, 2 bfloat16.
package main

/*
#include <stdint.h>
#include <string.h>
*/
import "C"

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/shoalml/shoal/collective"
	"github.com/shoalml/shoal/tensorcoll"
)

// abiVersion changes whenever an exported signature or enumeration does.
const abiVersion = 2

// session is what a handle holds: the Session and its ops by id.
type session struct {
	s      *tensorcoll.Session
	source string
	mu     sync.Mutex
	next   int64
	ops    map[int64]*tensorcoll.Op
}

func main() {}

// The sessions by handle: a C library's state has to live somewhere the
// exported functions reach, and handles must survive a bad or stale value
// (cgo.Handle panics on one).
var (
	sessions   sync.Map // int64 -> *session
	lastHandle atomic.Int64
)

// setErr writes msg into the caller's buffer, NUL-terminated, truncated.
func setErr(buf *C.char, n C.int, msg string) {
	if buf == nil || n <= 0 {
		return
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(n))
	k := copy(b[:len(b)-1], msg)
	b[k] = 0
}

func lookup(h C.int64_t) (*session, bool) {
	if h == 0 {
		return nil, false
	}
	v, ok := sessions.Load(int64(h))
	if !ok {
		return nil, false
	}
	return v.(*session), true
}

// shoal_abi_version returns the ABI version this library implements.
//
//export shoal_abi_version
func shoal_abi_version() C.int { return abiVersion }

// shoal_init forms the group and returns a session handle, or 0 with the
// reason in err. A negative rank takes rank, size, local rank, local size,
// and a master that is NULL or "" takes the master, from the environment
// as Shoal's workers read it (SHOAL_*, Open MPI, Slurm, torchrun;
// MASTER_ADDR/MASTER_PORT). timeout_ms bounds forming the group and each
// collective (0: 5 minutes). flags: bit 0 turns off shared memory, bit 1
// the descriptor check before each collective.
//
//export shoal_init
func shoal_init(rank, size, localRank, localSize C.int, master, jobID *C.char, timeoutMS C.int64_t, flags C.int, err *C.char, errlen C.int) C.int64_t {
	cfg := tensorcoll.DefaultConfig()
	source := "arguments"
	if master != nil {
		cfg.Master = C.GoString(master)
	}
	if jobID != nil {
		cfg.JobID = C.GoString(jobID)
	}
	if rank < 0 {
		m := cfg.Master
		var e error
		if cfg, source, e = tensorcoll.ConfigFromEnv(cfg, os.Getenv); e != nil {
			setErr(err, errlen, e.Error())
			return 0
		}
		if m != "" {
			cfg.Master = m
		}
	} else {
		cfg.Rank, cfg.Size, cfg.LocalRank, cfg.LocalSize = int(rank), int(size), int(localRank), int(localSize)
	}
	if timeoutMS > 0 {
		cfg.ConnectTimeout = time.Duration(timeoutMS) * time.Millisecond
		cfg.CallTimeout = cfg.ConnectTimeout
	}
	cfg.SharedMemory = flags&1 == 0
	cfg.SkipCheck = flags&2 != 0
	s, e := tensorcoll.Open(context.Background(), cfg)
	if e != nil {
		setErr(err, errlen, e.Error())
		return 0
	}
	id := lastHandle.Add(1)
	sessions.Store(id, &session{s: s, source: source, ops: make(map[int64]*tensorcoll.Op)})
	return C.int64_t(id)
}

// shoal_identity writes rank, size, local rank and local size into out[0..3].
//
//export shoal_identity
func shoal_identity(h C.int64_t, out *C.int64_t) C.int {
	ss, ok := lookup(h)
	if !ok {
		return -1
	}
	o := unsafe.Slice((*int64)(unsafe.Pointer(out)), 4)
	cfg := ss.s.Config()
	o[0], o[1], o[2], o[3] = int64(cfg.Rank), int64(cfg.Size), int64(cfg.LocalRank), int64(max(cfg.LocalSize, 1))
	return 0
}

func (ss *session) submit(req tensorcoll.Request, err *C.char, errlen C.int) C.int64_t {
	op, e := ss.s.Submit(req)
	if e != nil {
		setErr(err, errlen, e.Error())
		return 0
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.next++
	ss.ops[ss.next] = op
	return C.int64_t(ss.next)
}

func bytesAt(ptr unsafe.Pointer, n C.int64_t) []byte {
	if ptr == nil || n <= 0 {
		return nil
	}
	return unsafe.Slice((*byte)(ptr), int(n))
}

func badHandle(err *C.char, errlen C.int) C.int64_t {
	setErr(err, errlen, "shoal: unknown or shut-down session handle (call init first)")
	return 0
}

// shoal_allreduce queues a reduction of count elements of dtype at ptr,
// in place, and returns its op id (0 on error).
//
//export shoal_allreduce
func shoal_allreduce(h C.int64_t, ptr unsafe.Pointer, count C.int64_t, dtype, op, compression C.int, prescale, postscale C.double, name *C.char, err *C.char, errlen C.int) C.int64_t {
	ss, ok := lookup(h)
	if !ok {
		return badHandle(err, errlen)
	}
	dt := tensorcoll.DType(dtype)
	return ss.submit(tensorcoll.Request{Kind: tensorcoll.KindAllreduce, Name: C.GoString(name), Data: bytesAt(ptr, count*C.int64_t(dt.Size())), DType: dt,
		Op: tensorcoll.ReduceOp(op), Compression: collective.Compression(compression), Prescale: float64(prescale), Postscale: float64(postscale)}, err, errlen)
}

// shoal_broadcast queues a broadcast of nbytes at ptr from root.
//
//export shoal_broadcast
func shoal_broadcast(h C.int64_t, ptr unsafe.Pointer, nbytes C.int64_t, dtype, root C.int, name *C.char, err *C.char, errlen C.int) C.int64_t {
	ss, ok := lookup(h)
	if !ok {
		return badHandle(err, errlen)
	}
	return ss.submit(tensorcoll.Request{Kind: tensorcoll.KindBroadcast, Name: C.GoString(name), Data: bytesAt(ptr, nbytes), DType: tensorcoll.DType(dtype), Root: int(root)}, err, errlen)
}

// shoal_allgather queues a gather of every rank's nbytes at ptr (whole
// rows of row_bytes; ranks may give different numbers of rows). Its
// output waits in the library: shoal_result_bytes, shoal_result_copy.
//
//export shoal_allgather
func shoal_allgather(h C.int64_t, ptr unsafe.Pointer, nbytes C.int64_t, dtype C.int, rowBytes C.int64_t, name *C.char, err *C.char, errlen C.int) C.int64_t {
	ss, ok := lookup(h)
	if !ok {
		return badHandle(err, errlen)
	}
	return ss.submit(tensorcoll.Request{Kind: tensorcoll.KindAllgather, Name: C.GoString(name), Data: bytesAt(ptr, nbytes), DType: tensorcoll.DType(dtype), RowBytes: int(rowBytes)}, err, errlen)
}

// shoal_barrier queues a barrier.
//
//export shoal_barrier
func shoal_barrier(h C.int64_t, err *C.char, errlen C.int) C.int64_t {
	ss, ok := lookup(h)
	if !ok {
		return badHandle(err, errlen)
	}
	return ss.submit(tensorcoll.Request{Kind: tensorcoll.KindBarrier, Name: "barrier"}, err, errlen)
}

// lookupOp returns handle h's session and its op id, or nils.
func lookupOp(h, id C.int64_t) (*session, *tensorcoll.Op) {
	ss, ok := lookup(h)
	if !ok {
		return nil, nil
	}
	return ss, ss.op(id)
}

func (ss *session) op(id C.int64_t) *tensorcoll.Op {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.ops[int64(id)]
}

// shoal_poll returns 1 when op is done, 0 while it runs, -1 for an
// unknown op.
//
//export shoal_poll
func shoal_poll(h, id C.int64_t) C.int {
	_, op := lookupOp(h, id)
	if op == nil {
		return -1
	}
	select {
	case <-op.Done():
		return 1
	default:
		return 0
	}
}

// shoal_wait blocks until op is done and returns 0, or -1 with its error
// in err. Except for an allgather's (shoal_result_copy releases it), the
// op is forgotten afterwards.
//
//export shoal_wait
func shoal_wait(h, id C.int64_t, err *C.char, errlen C.int) C.int {
	ss, ok := lookup(h)
	if !ok {
		badHandle(err, errlen)
		return -1
	}
	op := ss.op(id)
	if op == nil {
		setErr(err, errlen, fmt.Sprintf("shoal: unknown op %d (already waited for?)", int64(id)))
		return -1
	}
	e := op.Wait(context.Background())
	if data, _ := op.Result(); data == nil || e != nil {
		ss.release(id)
	}
	if e != nil {
		setErr(err, errlen, e.Error())
		return -1
	}
	return 0
}

func (ss *session) release(id C.int64_t) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.ops, int64(id))
}

// shoal_result_bytes returns the size of a finished allgather's output
// and writes each rank's number of rows into rows[0..size-1]; -1 for an
// unknown or unfinished op.
//
//export shoal_result_bytes
func shoal_result_bytes(h, id C.int64_t, rows *C.int64_t) C.int64_t {
	_, op := lookupOp(h, id)
	if op == nil {
		return -1
	}
	select {
	case <-op.Done():
	default:
		return -1
	}
	data, rs := op.Result()
	if rows != nil {
		out := unsafe.Slice((*int64)(unsafe.Pointer(rows)), len(rs))
		for i, r := range rs {
			out[i] = int64(r)
		}
	}
	return C.int64_t(len(data))
}

// shoal_result_copy copies a finished allgather's output to out (which
// holds shoal_result_bytes bytes) and releases the op. It returns 0, or
// -1 for an unknown or unfinished op.
//
//export shoal_result_copy
func shoal_result_copy(h, id C.int64_t, out unsafe.Pointer) C.int {
	n := shoal_result_bytes(h, id, nil)
	if n < 0 {
		return -1
	}
	ss, _ := lookup(h)
	data, _ := ss.op(id).Result()
	if n > 0 {
		copy(unsafe.Slice((*byte)(out), int(n)), data)
	}
	ss.release(id)
	return 0
}

// shoal_shutdown ends the session: queued ops fail, the group's links
// close, and the handle is invalid afterwards.
//
//export shoal_shutdown
func shoal_shutdown(h C.int64_t, err *C.char, errlen C.int) C.int {
	v, ok := sessions.LoadAndDelete(int64(h))
	if !ok {
		return 0
	}
	ss := v.(*session)
	if e := ss.s.Close(); e != nil {
		setErr(err, errlen, e.Error())
		return -1
	}
	return 0
}
