package ps

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shoalml/shoal/optim"
	"github.com/shoalml/shoal/shard"
	"github.com/shoalml/shoal/timeline"
)

// chunk is one owned chunk of the vector with its optimizer state.
type chunk struct {
	r   shard.Range
	buf *valueBuf // the chunk's values now (buf.data)
	opt *optim.Optimizer
	// maxValue and maxState bound the magnitudes in values and in the
	// optimizer's state (growth.go); +Inf until measured.
	maxValue, maxState float64
}

// valueBuf holds one version of a chunk's values. The chunk holds a
// reference to its current version, and each reader that sends the values
// after the shard's lock is let go (ChunkRead.Hold) holds one more until
// it is done. An update writes in place while the chunk's is the only
// reference, and into another buffer otherwise (copy-on-write), so a held
// version never changes: a push-pull's reply goes out from the values
// themselves, without a copy under the lock.
type valueBuf struct {
	data []float32
	refs atomic.Int32
}

// newValueBuf returns an unheld buffer of n floats (contents
// undefined), from the shard's free list when it has one.
func (s *Server) newValueBuf(n int) *valueBuf {
	if p := s.freeVals.Get(n); p != nil {
		return valueBufOf(*p)
	}
	return valueBufOf(make([]float32, n))
}

// valueBufOf is data as an unheld valueBuf.
func valueBufOf(data []float32) *valueBuf {
	b := &valueBuf{data: data}
	b.refs.Store(1)
	return b
}

// release drops a reference to b, keeping it for reuse after the last.
func (s *Server) release(b *valueBuf) {
	if b.refs.Add(-1) == 0 {
		s.freeVals.Put(&b.data)
	}
}

// ChunkRead is one chunk as a ChunkReader gets it.
type ChunkRead struct {
	Range shard.Range
	// Values are the chunk's values, to be read before the reader
	// returns (under the shard's lock), or after it returns while held.
	Values []float32
	// Clock is the shard clock the values belong to.
	Clock int64
	s     *Server
	buf   *valueBuf
}

// Hold, called while the reader runs, keeps Values as they are after it
// returns, until release is called (once): later updates of the chunk go
// into another buffer meanwhile.
func (c ChunkRead) Hold() (release func()) {
	c.buf.refs.Add(1)
	var once sync.Once
	return func() { once.Do(func() { c.s.release(c.buf) }) }
}

// chunkRead is ch as a ChunkReader gets it (under the shard's lock).
func (s *Server) chunkRead(ch *chunk, clock int64) ChunkRead {
	return ChunkRead{Range: ch.r, Values: ch.buf.data, Clock: clock, s: s, buf: ch.buf}
}

// ownLocked makes ch's buffer one no reader holds, for a write in place
// that is not an update (restoring a checkpoint): a fresh one if a reader
// holds the current one, its contents undefined.
func (s *Server) ownLocked(ch *chunk) {
	if ch.buf.refs.Load() > 1 {
		b := s.newValueBuf(len(ch.buf.data))
		s.release(ch.buf)
		ch.buf = b
	}
}

// stepLocked runs the optimizer of every chunk over grads (the shard's
// floats, chunk after chunk, none larger in magnitude than gmax), calling
// after (when not nil) on each chunk once it is updated: in vector order,
// from the calling goroutine, unless the step is parallel. With
// Config.ParallelStep, several chunks and a share of at least
// parallelStepFloats, up to GOMAXPROCS goroutines take the chunks in
// order, and each updates a chunk (each chunk has its own optimizer state,
// so the values are the same bit for bit) and then calls after on it, so
// that each chunk goes to the reply as soon as it is ready: the update is
// memory-bound, and on one core it held the shard's lock for most of a
// push of the 670k MLP.
func (s *Server) stepLocked(grads []float32, gmax float64, after func(*chunk)) {
	s.stepChunksLocked(0, len(s.chunks), grads, gmax, after)
}

// stepChunksLocked is stepLocked on the chunks lo..hi-1 alone (a
// fragment, Config.Fragments), grads holding their floats.
func (s *Server) stepChunksLocked(lo, hi int, grads []float32, gmax float64, after func(*chunk)) {
	defer s.cfg.Timeline.Since(0, "optimizer step", time.Now(), timeline.Arg{Key: "clock", Val: s.clock})
	step := func(i int, g []float32) {
		ch := &s.chunks[i]
		ch.maxValue, ch.maxState, _ = ch.opt.StepBound(ch.maxValue, ch.maxState, gmax)
		dst := ch.buf
		if dst.refs.Load() > 1 { // a reply still sends these values
			dst = s.newValueBuf(len(ch.buf.data))
		}
		if err := ch.opt.StepInto(dst.data, ch.buf.data, g); err != nil {
			// Lengths were checked on the way in; this is a bug.
			panic(fmt.Sprintf("ps: optimizer step on chunk %v: %v", ch.r, err))
		}
		if dst != ch.buf {
			s.release(ch.buf)
			ch.buf = dst
		}
	}
	n := hi - lo
	par := min(runtime.GOMAXPROCS(0), n)
	if !s.cfg.ParallelStep || par < 2 || len(grads) < parallelStepFloats {
		at := 0
		for i := lo; i < hi; i++ {
			step(i, grads[at:at+s.chunks[i].r.Len])
			at += s.chunks[i].r.Len
			if after != nil {
				after(&s.chunks[i])
			}
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range par {
		wg.Go(func() {
			for i := lo + int(next.Add(1)-1); i < hi; i = lo + int(next.Add(1)-1) {
				at := s.chunkAt[i] - s.chunkAt[lo]
				step(i, grads[at:at+s.chunks[i].r.Len])
				if after != nil {
					after(&s.chunks[i])
				}
			}
		})
	}
	wg.Wait()
}

// parallelStepFloats is the smallest share whose chunks stepLocked
// updates in parallel: below it starting goroutines costs more than it
// saves.
const parallelStepFloats = 1 << 16
