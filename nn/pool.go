package nn

// maxPool2D takes the maximum of each k×k window, stride k, of every
// channel; rows and columns left over at the bottom and right edge are
// dropped, as in PyTorch's MaxPool2d (floor mode). Forward keeps the index
// of each window's maximum (the first, on a tie) for backward.
type maxPool2D struct {
	ishp, oshp shape
	k          int
	y, dx      []float32
	arg        []int32 // per output value, the index of its max within the sample
}

func newMaxPool2D(in shape, k int) *maxPool2D {
	return &maxPool2D{ishp: in, oshp: shape{in.c, in.h / k, in.w / k}, k: k}
}

func (mp *maxPool2D) in() shape  { return mp.ishp }
func (mp *maxPool2D) out() shape { return mp.oshp }

func (mp *maxPool2D) forward(_, x []float32, n int) []float32 {
	isz, osz := mp.ishp.size(), mp.oshp.size()
	mp.y = grow(mp.y, n*osz)
	if cap(mp.arg) < n*osz {
		mp.arg = make([]int32, n*osz)
	}
	mp.arg = mp.arg[:n*osz]
	if mp.k == 2 {
		mp.forward2(x, n)
		return mp.y
	}
	k, iw := mp.k, mp.ishp.w
	for s := range n {
		xs := x[s*isz : (s+1)*isz]
		o := s * osz
		for c := range mp.ishp.c {
			base := c * mp.ishp.h * iw
			for oy := range mp.oshp.h {
				for ox := range mp.oshp.w {
					best := base + oy*k*iw + ox*k
					for i := range k {
						for j := range k {
							if at := base + (oy*k+i)*iw + ox*k + j; xs[at] > xs[best] {
								best = at
							}
						}
					}
					mp.y[o] = xs[best]
					mp.arg[o] = int32(best)
					o++
				}
			}
		}
	}
	return mp.y
}

// forward2 is forward for the 2×2 windows of the models, unrolled and
// without branches on the data: the index of each pair's larger value, and
// then of the larger pair, is chosen with conditional moves (a branch per
// comparison is mispredicted about half the time, which made this loop
// three to four times slower). Ties go to the first, as in forward.
func (mp *maxPool2D) forward2(x []float32, n int) {
	isz, iw, ow := mp.ishp.size(), mp.ishp.w, mp.oshp.w
	o := 0
	for s := range n {
		xs := x[s*isz : (s+1)*isz]
		for c := range mp.ishp.c {
			base := c * mp.ishp.h * iw
			for oy := range mp.oshp.h {
				r0 := base + 2*oy*iw
				r1 := r0 + iw
				row0, row1 := xs[r0:r0+2*ow], xs[r1:r1+2*ow]
				y, arg := mp.y[o:o+ow], mp.arg[o:o+ow]
				for ox := range y {
					a, b := row0[2*ox], row0[2*ox+1]
					c, d := row1[2*ox], row1[2*ox+1]
					i, j := r0+2*ox, r1+2*ox
					if b > a {
						i++
					}
					if d > c {
						j++
					}
					ab, cd := max(a, b), max(c, d)
					if cd > ab {
						i = j
					}
					y[ox] = max(ab, cd)
					arg[ox] = int32(i)
				}
				o += ow
			}
		}
	}
}

func (mp *maxPool2D) backward(_, _, _, _, dy []float32, n int, needDx bool) []float32 {
	if !needDx {
		return nil
	}
	isz, osz := mp.ishp.size(), mp.oshp.size()
	mp.dx = grow(mp.dx, n*isz)
	clear(mp.dx)
	for s := range n {
		dxs := mp.dx[s*isz : (s+1)*isz]
		arg := mp.arg[s*osz : (s+1)*osz]
		for o, v := range dy[s*osz : (s+1)*osz] {
			dxs[arg[o]] += v
		}
	}
	return mp.dx
}
