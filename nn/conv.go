package nn

import "math/rand/v2"

// conv2d is a 2-D convolution with stride 1 and zero padding pad on every
// side, optionally followed by a fused ReLU; strictly a cross-correlation,
// as in PyTorch's nn.Conv2d, whose weight [outC inC kH kW] and bias [outC]
// layouts it shares.
//
// It runs sample by sample: im2col lays the receptive fields of one sample
// out as the columns of a (inC·kH·kW)×(Ho·Wo) matrix, which one GEMM with
// the weight, seen as an outC×(inC·kH·kW) matrix, turns into the sample's
// output planes. Per-sample matrices stay in cache, and backward rebuilds
// them rather than keeping a batch's worth.
type conv2d struct {
	be          Backend
	ishp, oshp  shape
	kh, kw, pad int
	w, b        Tensor
	relu        bool // ReLU fused into the output
	heInit      bool // a ReLU follows: init with sqrt(6/fan_in)
	col, dcol   []float32
	y, dx       []float32
}

// newConv2D adds name.weight [outC in.c kh kw] and name.bias [outC] to lay.
// The output is outC × (in.h+2·pad-kh+1) × (in.w+2·pad-kw+1); the caller
// checks that it is not empty.
func newConv2D(be Backend, lay *Layout, name string, in shape, outC, kh, kw, pad int) *conv2d {
	return &conv2d{
		be:   be,
		ishp: in,
		oshp: shape{outC, in.h + 2*pad - kh + 1, in.w + 2*pad - kw + 1},
		kh:   kh,
		kw:   kw,
		pad:  pad,
		w:    lay.Add(name+".weight", outC, in.c, kh, kw),
		b:    lay.Add(name+".bias", outC),
	}
}

func (cv *conv2d) in() shape       { return cv.ishp }
func (cv *conv2d) out() shape      { return cv.oshp }
func (cv *conv2d) followedByReLU() { cv.heInit = true }
func (cv *conv2d) fuseReLU()       { cv.relu = true }
func (cv *conv2d) offset() int     { return cv.w.Offset }
func (cv *conv2d) init(p []float32, rng *rand.Rand) {
	kaimingUniform(cv.w.View(p), cv.ishp.c*cv.kh*cv.kw, cv.heInit, rng)
	clear(cv.b.View(p))
}

// direct reports whether a sample already is its own im2col matrix (a 1×1
// kernel without padding).
func (cv *conv2d) direct() bool { return cv.kh == 1 && cv.kw == 1 && cv.pad == 0 }

func (cv *conv2d) forward(p, x []float32, n int) []float32 {
	k := cv.ishp.c * cv.kh * cv.kw
	hw := cv.oshp.h * cv.oshp.w
	isz, osz := cv.ishp.size(), cv.oshp.size()
	cv.y = grow(cv.y, n*osz)
	if !cv.direct() {
		cv.col = grow(cv.col, k*hw)
	}
	w := cv.w.View(p)
	for s := range n {
		col := cv.cols(x[s*isz : (s+1)*isz])
		// y_s[outC×hw] = W[outC×k] · col[k×hw]
		cv.be.Gemm(false, false, cv.oshp.c, hw, k, 1, w, k, col, hw, 0, cv.y[s*osz:(s+1)*osz], hw)
	}
	addBias(cv.y, cv.b.View(p), n, hw, cv.relu)
	return cv.y
}

// cols returns the im2col matrix of sample xs, built in cv.col.
func (cv *conv2d) cols(xs []float32) []float32 {
	if cv.direct() {
		return xs
	}
	im2col(cv.col, xs, cv.ishp, cv.oshp, cv.kh, cv.kw, cv.pad)
	return cv.col
}

func (cv *conv2d) backward(p, g, x, y, dy []float32, n int, needDx bool) []float32 {
	k := cv.ishp.c * cv.kh * cv.kw
	hw := cv.oshp.h * cv.oshp.w
	isz, osz := cv.ishp.size(), cv.oshp.size()
	dy = dy[:n*osz]
	if cv.relu {
		reluGrad(dy, dy, y)
	}

	db := cv.b.View(g)
	clear(db)
	for s := range n {
		for c := range db {
			db[c] += sum32(dy[(s*cv.oshp.c+c)*hw : (s*cv.oshp.c+c+1)*hw])
		}
	}

	w, dw := cv.w.View(p), cv.w.View(g)
	if needDx {
		cv.dx = grow(cv.dx, n*isz)
		if !cv.direct() {
			cv.dcol = grow(cv.dcol, k*hw)
		}
	}
	if n == 0 {
		clear(dw)
	}
	for s := range n {
		dys := dy[s*osz : (s+1)*osz]
		col := cv.cols(x[s*isz : (s+1)*isz])
		// dW[outC×k] (+)= dy_s[outC×hw] · col[k×hw]ᵀ
		beta := float32(1)
		if s == 0 {
			beta = 0
		}
		cv.be.Gemm(false, true, cv.oshp.c, k, hw, 1, dys, hw, col, hw, beta, dw, k)
		if !needDx {
			continue
		}
		dxs := cv.dx[s*isz : (s+1)*isz]
		if cv.direct() {
			// dx_s[k×hw] = W[outC×k]ᵀ · dy_s[outC×hw]
			cv.be.Gemm(true, false, k, hw, cv.oshp.c, 1, w, k, dys, hw, 0, dxs, hw)
			continue
		}
		cv.be.Gemm(true, false, k, hw, cv.oshp.c, 1, w, k, dys, hw, 0, cv.dcol, hw)
		clear(dxs)
		col2im(dxs, cv.dcol, cv.ishp, cv.oshp, cv.kh, cv.kw, cv.pad)
	}
	if !needDx {
		return nil
	}
	return cv.dx
}

// im2col writes into col, a (in.c·kh·kw)×(out.h·out.w) row-major matrix,
// the receptive fields of the sample x (in.c×in.h×in.w): row (c·kh+i)·kw+j,
// column oy·out.w+ox holds x[c][oy+i-pad][ox+j-pad], or 0 in the padding.
func im2col(col, x []float32, in, out shape, kh, kw, pad int) {
	hw := out.h * out.w
	for c := range in.c {
		plane := x[c*in.h*in.w : (c+1)*in.h*in.w]
		for i := range kh {
			for j := range kw {
				row := col[((c*kh+i)*kw+j)*hw : ((c*kh+i)*kw+j+1)*hw]
				if out.w == in.w {
					im2colSame(row, plane, in, out, i-pad, j-pad)
					continue
				}
				lo, hi := span(j, pad, in.w, out.w)
				for oy := range out.h {
					seg := row[oy*out.w : (oy+1)*out.w]
					iy := oy + i - pad
					if iy < 0 || iy >= in.h || lo >= hi {
						clear(seg)
						continue
					}
					src := plane[iy*in.w : (iy+1)*in.w]
					clear(seg[:lo])
					copy(seg[lo:hi], src[lo+j-pad:hi+j-pad])
					clear(seg[hi:])
				}
			}
		}
	}
}

// sameRange returns, for a kernel tap at offset (di, dj) of a convolution
// whose output rows are as wide as its input's (out.w == in.w), the range
// [lo, hi) of flat output indices t = oy·w+ox whose input index t+off,
// off = di·w+dj, lies in the plane, and off. Inside that range, the
// outputs whose column ox+dj falls off the row (wrapped into the row
// before or after) are the only ones in the padding.
func sameRange(in, out shape, di, dj int) (lo, hi, off int) {
	w := in.w
	oy0, oy1 := max(0, -di), min(out.h, in.h-di)
	off = di*w + dj
	lo, hi = max(oy0*w, -off), min(oy1*w, in.h*w-off)
	if lo > hi {
		lo, hi = 0, 0
	}
	return lo, hi, off
}

// im2colSame is one row of im2col (the tap at offset (di, dj)) for
// out.w == in.w: inside the rows that the tap reads, the row of col is the
// plane shifted by di·w+dj, copied in one piece, with the columns that
// wrapped around cleared after. It saves a copy and two clears per output
// row.
func im2colSame(row, plane []float32, in, out shape, di, dj int) {
	w := in.w
	if dj <= -w || dj >= w {
		clear(row)
		return
	}
	lo, hi, off := sameRange(in, out, di, dj)
	clear(row[:lo])
	copy(row[lo:hi], plane[lo+off:hi+off])
	clear(row[hi:])
	clearWrapped(row[lo:hi], lo, w, dj)
}

// clearWrapped clears, in seg (the flat indices [lo, lo+len(seg)) of rows
// w wide), the columns ox with ox+dj outside [0, w).
func clearWrapped(seg []float32, lo, w, dj int) {
	if dj == 0 || len(seg) == 0 {
		return
	}
	// Columns [0, -dj) when dj < 0, [w-dj, w) when dj > 0.
	c0, c1 := 0, -dj
	if dj > 0 {
		c0, c1 = w-dj, w
	}
	for r := lo - lo%w; r < lo+len(seg); r += w {
		// A column or two per row: a loop beats a call to clear.
		for x := max(r+c0, lo); x < min(r+c1, lo+len(seg)); x++ {
			seg[x-lo] = 0
		}
	}
}

// col2im adds the columns of col, laid out as by im2col, back onto the
// sample dx they would have been read from; dx is not cleared first. col
// is scratch: the entries that im2col would have set to 0 (the padding)
// may be cleared.
func col2im(dx, col []float32, in, out shape, kh, kw, pad int) {
	hw := out.h * out.w
	for c := range in.c {
		plane := dx[c*in.h*in.w : (c+1)*in.h*in.w]
		for i := range kh {
			for j := range kw {
				row := col[((c*kh+i)*kw+j)*hw : ((c*kh+i)*kw+j+1)*hw]
				if out.w == in.w {
					col2imSame(plane, row, in, out, i-pad, j-pad)
					continue
				}
				lo, hi := span(j, pad, in.w, out.w)
				if lo >= hi {
					continue
				}
				for oy := range out.h {
					iy := oy + i - pad
					if iy < 0 || iy >= in.h {
						continue
					}
					dst := plane[iy*in.w+lo+j-pad : iy*in.w+hi+j-pad]
					for t, v := range row[oy*out.w+lo : oy*out.w+hi] {
						dst[t] += v
					}
				}
			}
		}
	}
}

// col2imSame is one row of col2im for out.w == in.w, the adjoint of
// im2colSame: it clears the wrapped columns of row, then adds it onto the
// plane shifted by di·w+dj in one pass.
func col2imSame(plane, row []float32, in, out shape, di, dj int) {
	w := in.w
	if dj <= -w || dj >= w {
		return
	}
	lo, hi, off := sameRange(in, out, di, dj)
	src := row[lo:hi]
	clearWrapped(src, lo, w, dj)
	add(plane[lo+off:hi+off], src)
}

// add sets dst[i] += src[i] for every i of dst. Unrolled by four, which
// measured a quarter faster than the plain loop.
func add(dst, src []float32) {
	src = src[:len(dst)]
	for len(dst) >= 4 {
		dst[0] += src[0]
		dst[1] += src[1]
		dst[2] += src[2]
		dst[3] += src[3]
		dst, src = dst[4:], src[4:]
	}
	for i, v := range src {
		dst[i] += v
	}
}

// sum32 returns the sum of v, in float32, with eight partial sums: one
// running sum would wait on the latency of every addition.
func sum32(v []float32) float32 {
	var s [8]float32
	for len(v) >= 8 {
		s[0] += v[0]
		s[1] += v[1]
		s[2] += v[2]
		s[3] += v[3]
		s[4] += v[4]
		s[5] += v[5]
		s[6] += v[6]
		s[7] += v[7]
		v = v[8:]
	}
	for i, x := range v {
		s[i] += x
	}
	return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))
}

// span returns the range [lo, hi) of output columns ox whose input column
// ox+j-pad lies inside [0, inW).
func span(j, pad, inW, outW int) (lo, hi int) {
	return max(0, pad-j), min(outW, inW+pad-j)
}
