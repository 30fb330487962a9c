//go:build cgo

package main

/*
#include <stdint.h>
*/
import "C"

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"
	"unsafe"

	"github.com/shoalml/shoal/nn"
	pb "github.com/shoalml/shoal/proto/shoalpb"
	"github.com/shoalml/shoal/tensorps"
)

// The parameter-server sessions by handle (their own numbering: a ring
// handle is not a PS handle).
var (
	psSessions sync.Map // int64 -> *psSession
	psLast     int64
	psMu       sync.Mutex
)

type psSession struct {
	mu sync.Mutex // the session's calls go one at a time
	s  *tensorps.Session
}

// parseLayout reads [{"name":"fc.weight","shape":[128,784]},...].
func parseLayout(js *C.char) (nn.Layout, error) {
	var ts []struct {
		Name  string `json:"name"`
		Shape []int  `json:"shape"`
	}
	if err := json.Unmarshal([]byte(C.GoString(js)), &ts); err != nil {
		return nn.Layout{}, fmt.Errorf("layout: %v (want [{\"name\":...,\"shape\":[...]},...])", err)
	}
	var l nn.Layout
	for _, t := range ts {
		l.Add(t.Name, t.Shape...)
	}
	if err := l.Validate(); err != nil {
		return nn.Layout{}, err
	}
	return l, nil
}

// floatSlice is n floats at p; nil for a nil pointer or n <= 0 (the
// session then refuses the length, where unsafe.Slice would panic).
func floatSlice(p unsafe.Pointer, n C.int64_t) []float32 {
	if p == nil || n <= 0 {
		return nil
	}
	return unsafe.Slice((*float32)(p), int(n))
}

// shoal_ps_write_model writes the model's layout (JSON, as
// shoal_ps_open's) and its n initial values to path, where shards started
// with --init-from wait for them. It returns 0, or -1 with the reason in
// err.
//
//export shoal_ps_write_model
func shoal_ps_write_model(path, layout *C.char, data unsafe.Pointer, n C.int64_t, err *C.char, errlen C.int) C.int {
	l, e := parseLayout(layout)
	if e == nil && int64(l.Size()) != int64(n) {
		e = fmt.Errorf("a layout of %d floats and %d values", l.Size(), int64(n))
	}
	if e == nil {
		e = tensorps.WriteModel(C.GoString(path), l, floatSlice(data, n))
	}
	if e != nil {
		setErr(err, errlen, e.Error())
		return -1
	}
	return 0
}

// shoal_ps_open connects this rank to the job's parameter servers, as the
// environment names them (SHOAL_MODE, SHOAL_SERVERS, the rank and size,
// SHOAL_TLS_*, SHOAL_AUTH_TOKEN_FILE: tensorps.ConfigFromEnv), checks
// that they serve layout, and joins the run. encoding: 0 float32, 1
// float16, 2 bfloat16 pushes, as the script's optimizer asks; with 0,
// SHOAL_COMPRESSION's (shoal run --compression, int8 too), which another
// must equal. timeout_ms bounds connecting (0: a minute).
// It returns a handle, or 0 with the reason in err.
//
//export shoal_ps_open
func shoal_ps_open(layout *C.char, encoding C.int, timeoutMS C.int64_t, err *C.char, errlen C.int) C.int64_t {
	l, e := parseLayout(layout)
	if e != nil {
		setErr(err, errlen, e.Error())
		return 0
	}
	cfg, e := tensorps.ConfigFromEnv(tensorps.DefaultConfig(), os.Getenv)
	if e != nil {
		setErr(err, errlen, e.Error())
		return 0
	}
	if encoding < 0 || encoding > 2 {
		setErr(err, errlen, fmt.Sprintf("encoding %d: want 0 (float32), 1 (float16) or 2 (bfloat16)", int(encoding)))
		return 0
	}
	if cfg, e = cfg.WithScriptEncoding(pb.Encoding(encoding)); e != nil {
		setErr(err, errlen, e.Error())
		return 0
	}
	if timeoutMS > 0 {
		cfg.ConnectTimeout = time.Duration(timeoutMS) * time.Millisecond
	}
	rank, wait := cfg.Rank, cfg.ConnectTimeout
	cfg.Notice = func(addr string, err error) {
		fmt.Fprintf(os.Stderr, "shoal.torch: rank %d: parameter server %s not reachable yet (trying for %v in all): %v\n", rank, addr, wait, err)
	}
	s, e := tensorps.Open(context.Background(), cfg, l)
	if e != nil {
		setErr(err, errlen, e.Error())
		return 0
	}
	psMu.Lock()
	psLast++
	id := psLast
	psMu.Unlock()
	psSessions.Store(id, &psSession{s: s})
	return C.int64_t(id)
}

func lookupPS(h C.int64_t, err *C.char, errlen C.int) *psSession {
	v, ok := psSessions.Load(int64(h))
	if !ok {
		setErr(err, errlen, fmt.Sprintf("shoal: unknown parameter-server handle %d (closed?)", int64(h)))
		return nil
	}
	return v.(*psSession)
}

// shoal_ps_params writes the current step's weights (n floats) into dst.
// It returns 0, or -1 with the reason in err.
//
//export shoal_ps_params
func shoal_ps_params(h C.int64_t, dst unsafe.Pointer, n C.int64_t, err *C.char, errlen C.int) C.int {
	ps := lookupPS(h, err, errlen)
	if ps == nil {
		return -1
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if e := ps.s.Params(context.Background(), floatSlice(dst, n)); e != nil {
		setErr(err, errlen, e.Error())
		return -1
	}
	return 0
}

// shoal_ps_push pushes the step's vector (n floats, applied by the
// shards' optimizer) and writes the next step's weights into dst. It
// returns 0, or -1 with the reason in err.
//
//export shoal_ps_push
func shoal_ps_push(h C.int64_t, grads, dst unsafe.Pointer, n C.int64_t, err *C.char, errlen C.int) C.int {
	ps := lookupPS(h, err, errlen)
	if ps == nil {
		return -1
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if e := ps.s.Push(context.Background(), floatSlice(grads, n), floatSlice(dst, n)); e != nil {
		setErr(err, errlen, e.Error())
		return -1
	}
	return 0
}

// shoal_ps_stats writes what the session saw into out[0..5]: steps
// pushed, the step it began at, sync pushes dropped (backup workers), the
// largest staleness of an async or SSP push, the pushes counted by
// staleness and the sum of their staleness. It returns 0, or -1 for an
// unknown handle.
//
//export shoal_ps_stats
func shoal_ps_stats(h C.int64_t, out *C.int64_t) C.int {
	ps := lookupPS(h, nil, 0)
	if ps == nil {
		return -1
	}
	ps.mu.Lock()
	st := ps.s.Stats()
	ps.mu.Unlock()
	var worst, count, sum int64
	for s, k := range st.Staleness {
		worst = max(worst, s)
		count += k
		sum += s * k
	}
	o := unsafe.Slice((*int64)(unsafe.Pointer(out)), 6)
	o[0], o[1], o[2], o[3], o[4], o[5] = st.Steps, st.StartStep, st.Dropped, worst, count, sum
	return 0
}

// shoal_ps_close sends what is pending and closes the session; the handle
// is invalid afterwards. It returns 0, or -1 with the reason in err.
//
//export shoal_ps_close
func shoal_ps_close(h C.int64_t, err *C.char, errlen C.int) C.int {
	v, ok := psSessions.LoadAndDelete(int64(h))
	if !ok {
		return 0
	}
	ps := v.(*psSession)
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if e := ps.s.Close(ctx); e != nil {
		setErr(err, errlen, e.Error())
		return -1
	}
	return 0
}
