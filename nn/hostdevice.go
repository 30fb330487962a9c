package nn

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/shoalml/shoal/optim"
	"github.com/shoalml/shoal/wire"
)

// HostDevice is the Device whose memory is host memory and whose
// operations run at once on the calling goroutine, with the CPU Backend's
// GEMMs. It is the reference for the conformance suite (nn/devicetest)
// and lets NewOnDevice's model be tested on any machine; for training on
// the CPU, New's models are faster (they fuse more and skip the copies).
type HostDevice struct {
	be Backend
}

var _ Device = (*HostDevice)(nil)

// NewHostDevice returns a HostDevice whose GEMMs run on be (NewCPU() if
// nil).
func NewHostDevice(be Backend) *HostDevice {
	if be == nil {
		be = NewCPU()
	}
	return &HostDevice{be: be}
}

// hostMem is a HostDevice allocation, float32-aligned.
type hostMem struct{ w []float32 }

// Name returns "host/" and the GEMM backend's name.
func (d *HostDevice) Name() string { return "host/" + d.be.Name() }

// Alloc returns host memory, zeroed.
func (d *HostDevice) Alloc(bytes int) (Mem, error) {
	if bytes < 0 {
		return Mem{}, fmt.Errorf("nn: HostDevice.Alloc(%d): want a size >= 0", bytes)
	}
	return NewMem(&hostMem{w: make([]float32, (bytes+3)/4)}, bytes), nil
}

// Free does nothing: the garbage collector frees host memory.
func (d *HostDevice) Free(Mem) {}

// bytesOf returns the bytes of m.
func bytesOf(m Mem) []byte {
	h, off := m.Handle()
	hm, ok := h.(*hostMem)
	if !ok {
		panic(fmt.Sprintf("nn: HostDevice: memory of another device (%T)", h))
	}
	all := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(hm.w))), 4*len(hm.w))
	return all[off : off+m.Bytes()]
}

// f32 returns the first n float32 of m, panicking if m is shorter.
func f32(op string, m Mem, n int) []float32 {
	m.Check(op, n)
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&bytesOf(m)[0])), n)
}

func i32(op string, m Mem, n int) []int32 {
	m.Check(op, n)
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*int32)(unsafe.Pointer(&bytesOf(m)[0])), n)
}

// Upload copies src into dst.
func (d *HostDevice) Upload(dst Mem, src []byte) {
	if len(src) > dst.Bytes() {
		panic(fmt.Sprintf("nn: HostDevice.Upload: %d bytes into %d", len(src), dst.Bytes()))
	}
	copy(bytesOf(dst), src)
}

// Download copies src into dst.
func (d *HostDevice) Download(dst []byte, src Mem) {
	if len(dst) > src.Bytes() {
		panic(fmt.Sprintf("nn: HostDevice.Download: %d bytes from %d", len(dst), src.Bytes()))
	}
	copy(dst, bytesOf(src))
}

// Zero clears n elements.
func (d *HostDevice) Zero(m Mem, n int) { clear(f32("Zero", m, n)) }

// Gemm runs the product on the backend.
func (d *HostDevice) Gemm(tA, tB bool, m, n, k int, alpha float32, a Mem, lda int, b Mem, ldb int, beta float32, c Mem, ldc int) {
	d.be.Gemm(tA, tB, m, n, k, alpha, f32("Gemm", a, a.Bytes()/4), lda, f32("Gemm", b, b.Bytes()/4), ldb, beta, f32("Gemm", c, c.Bytes()/4), ldc)
}

// BiasAct adds the bias and applies the ReLU as the CPU layers do.
func (d *HostDevice) BiasAct(y, b Mem, n, ch, hw int, relu bool) {
	addBias(f32("BiasAct", y, n*ch*hw), f32("BiasAct", b, ch), n, hw, relu)
}

// BiasGrad sums dy per channel.
func (d *HostDevice) BiasGrad(db, dy, y Mem, n, ch, hw int) {
	if !y.Nil() {
		d.ReLUBackward(dy, y, n*ch*hw)
	}
	out, x := f32("BiasGrad", db, ch), f32("BiasGrad", dy, n*ch*hw)
	clear(out)
	for s := range n {
		for c := range ch {
			var sum float32
			for _, v := range x[(s*ch+c)*hw : (s*ch+c+1)*hw] {
				sum += v
			}
			out[c] += sum
		}
	}
}

// ReLUBackward zeroes dy where y <= 0.
func (d *HostDevice) ReLUBackward(dy, y Mem, n int) {
	g := f32("ReLUBackward", dy, n)
	reluGrad(g, g, f32("ReLUBackward", y, n))
}

// SoftmaxXent computes the loss per row in float64, as softmaxCE does.
func (d *HostDevice) SoftmaxXent(z, labels, dz, loss, correct Mem, rows, classes int, scale float32) {
	zs, labs := f32("SoftmaxXent", z, rows*classes), i32("SoftmaxXent", labels, rows)
	ls, cs := f32("SoftmaxXent", loss, rows), i32("SoftmaxXent", correct, rows)
	var dzs []float32
	if !dz.Nil() {
		dzs = f32("SoftmaxXent", dz, rows*classes)
	}
	for r := range rows {
		row := zs[r*classes : (r+1)*classes]
		arg := 0
		for j, v := range row {
			if v > row[arg] {
				arg = j
			}
		}
		lab := int(labs[r])
		cs[r] = 0
		if arg == lab {
			cs[r] = 1
		}
		m := float64(row[arg])
		var sum float64
		for _, v := range row {
			sum += math.Exp(float64(v) - m)
		}
		lse := m + math.Log(sum)
		ls[r] = float32(lse - float64(row[lab]))
		if dzs != nil {
			for j, v := range row {
				q := math.Exp(float64(v) - lse)
				if j == lab {
					q--
				}
				dzs[r*classes+j] = float32(q * float64(scale))
			}
		}
	}
}

// SGDMomentum runs optim's momentum step.
func (d *HostDevice) SGDMomentum(p, buf, g Mem, n int, lr, mu, wd float32, nesterov bool) {
	optim.StepMomentum(f32("SGDMomentum", p, n), f32("SGDMomentum", g, n), f32("SGDMomentum", buf, n), lr, wd, mu, nesterov)
}

// Adam runs optim's Adam step.
func (d *HostDevice) Adam(p, m, v, g Mem, n int, k optim.AdamStep) {
	optim.StepAdam(f32("Adam", p, n), f32("Adam", g, n), f32("Adam", m, n), f32("Adam", v, n), k)
}

// Im2Col runs the CPU layers' im2col on each sample and lays the
// samples' columns side by side.
func (d *HostDevice) Im2Col(x, col Mem, n, c, h, w, kh, kw, pad, oh, ow int) {
	k, hw, isz := c*kh*kw, oh*ow, c*h*w
	cols, xs := f32("Im2Col", col, n*k*hw), f32("Im2Col", x, n*isz)
	one := make([]float32, k*hw)
	for s := range n {
		im2col(one, xs[s*isz:(s+1)*isz], shape{c, h, w}, shape{0, oh, ow}, kh, kw, pad)
		for r := range k {
			copy(cols[r*n*hw+s*hw:r*n*hw+(s+1)*hw], one[r*hw:(r+1)*hw])
		}
	}
}

// Col2Im runs the CPU layers' col2im on each sample into a cleared dx.
func (d *HostDevice) Col2Im(col, dx Mem, n, c, h, w, kh, kw, pad, oh, ow int) {
	k, hw, isz := c*kh*kw, oh*ow, c*h*w
	out, cols := f32("Col2Im", dx, n*isz), f32("Col2Im", col, n*k*hw)
	clear(out)
	one := make([]float32, k*hw)
	for s := range n {
		for r := range k {
			copy(one[r*hw:(r+1)*hw], cols[r*n*hw+s*hw:r*n*hw+(s+1)*hw])
		}
		col2im(out[s*isz:(s+1)*isz], one, shape{c, h, w}, shape{0, oh, ow}, kh, kw, pad)
	}
}

// SwapAxes transposes the first two axes of an a×b×c array.
func (d *HostDevice) SwapAxes(dst, src Mem, a, b, c int) {
	out, in := f32("SwapAxes", dst, a*b*c), f32("SwapAxes", src, a*b*c)
	for i := range a {
		for j := range b {
			copy(out[(j*a+i)*c:(j*a+i+1)*c], in[(i*b+j)*c:(i*b+j+1)*c])
		}
	}
}

// MaxPoolForward keeps each window's first maximum.
func (d *HostDevice) MaxPoolForward(x, y, arg Mem, n, c, h, w, k int) {
	oh, ow := h/k, w/k
	xs, ys, as := f32("MaxPoolForward", x, n*c*h*w), f32("MaxPoolForward", y, n*c*oh*ow), i32("MaxPoolForward", arg, n*c*oh*ow)
	o := 0
	for s := range n {
		xs := xs[s*c*h*w : (s+1)*c*h*w]
		for ci := range c {
			for oy := range oh {
				for ox := range ow {
					best := ci*h*w + oy*k*w + ox*k
					for i := range k {
						for j := range k {
							if at := ci*h*w + (oy*k+i)*w + ox*k + j; xs[at] > xs[best] {
								best = at
							}
						}
					}
					ys[o], as[o] = xs[best], int32(best)
					o++
				}
			}
		}
	}
}

// MaxPoolBackward routes dy to the recorded maxima.
func (d *HostDevice) MaxPoolBackward(dy, arg, dx Mem, n, c, h, w, k int) {
	osz, isz := c*(h/k)*(w/k), c*h*w
	g, as, out := f32("MaxPoolBackward", dy, n*osz), i32("MaxPoolBackward", arg, n*osz), f32("MaxPoolBackward", dx, n*isz)
	clear(out)
	for s := range n {
		for o, v := range g[s*osz : (s+1)*osz] {
			out[s*isz+int(as[s*osz+o])] += v
		}
	}
}

func halfEncoding(bf16 bool) wire.Encoding {
	if bf16 {
		return wire.BFloat16
	}
	return wire.Float16
}

// halves returns the bytes of the first n 2-byte elements of m.
func halves(op string, m Mem, n int) []byte {
	m.CheckHalves(op, n)
	return bytesOf(m)[:2*n]
}

// ToHalf encodes with package wire (little-endian, as device memory is on
// every platform Shoal runs on).
func (d *HostDevice) ToHalf(dst, src Mem, n int, bf16 bool) {
	halfEncoding(bf16).Put(halves("ToHalf", dst, n), f32("ToHalf", src, n))
}

// FromHalf decodes with package wire.
func (d *HostDevice) FromHalf(dst, src Mem, n int, bf16 bool) {
	if err := halfEncoding(bf16).Decode(f32("FromHalf", dst, n), halves("FromHalf", src, n)); err != nil {
		panic("nn: FromHalf: " + err.Error())
	}
}

// GemmHalf widens a and b to float32 and runs the product on the
// backend, which accumulates in float32.
func (d *HostDevice) GemmHalf(tA, tB bool, m, n, k int, alpha float32, a Mem, lda int, b Mem, ldb int, beta float32, c Mem, ldc int, bf16 bool) {
	widen := func(h Mem) []float32 {
		w := make([]float32, h.Bytes()/2)
		if err := halfEncoding(bf16).Decode(w, halves("GemmHalf", h, len(w))); err != nil {
			panic("nn: GemmHalf: " + err.Error())
		}
		return w
	}
	d.be.Gemm(tA, tB, m, n, k, alpha, widen(a), lda, widen(b), ldb, beta, f32("GemmHalf", c, c.Bytes()/4), ldc)
}

// Unscale multiplies in float32, as the CUDA kernel does.
func (d *HostDevice) Unscale(g Mem, n int, s float32, found Mem) {
	flag, gs := i32("Unscale", found, 1), f32("Unscale", g, n)
	for i, v := range gs {
		v *= s
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			flag[0] = 1
		}
		gs[i] = v
	}
}

// Sync returns nil: the work is done.
func (d *HostDevice) Sync() error { return nil }

// Close does nothing.
func (d *HostDevice) Close() error { return nil }
