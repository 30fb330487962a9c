package nn

import (
	"math"
	"math/rand/v2"
)

// dense is a fully connected layer, y = x·Wᵀ + b, optionally followed by a
// fused ReLU. Its weight has shape [out in] and its bias [out], as in
// PyTorch's nn.Linear, so checkpoints line up tensor for tensor.
type dense struct {
	be        Backend
	nin, nout int
	w, b      Tensor
	relu      bool // ReLU fused into the output
	heInit    bool // a ReLU follows: init with sqrt(6/fan_in)
	y, dx     []float32
}

// newDense adds name.weight [out in] and name.bias [out] to lay.
func newDense(be Backend, lay *Layout, name string, in, out int) *dense {
	return &dense{
		be:   be,
		nin:  in,
		nout: out,
		w:    lay.Add(name+".weight", out, in),
		b:    lay.Add(name+".bias", out),
	}
}

func (d *dense) in() shape       { return shape{d.nin, 1, 1} }
func (d *dense) out() shape      { return shape{d.nout, 1, 1} }
func (d *dense) followedByReLU() { d.heInit = true }
func (d *dense) fuseReLU()       { d.relu = true }
func (d *dense) offset() int     { return d.w.Offset }
func (d *dense) init(p []float32, rng *rand.Rand) {
	kaimingUniform(d.w.View(p), d.nin, d.heInit, rng)
	clear(d.b.View(p))
}

func (d *dense) forward(p, x []float32, n int) []float32 {
	d.y = grow(d.y, n*d.nout)
	// y[n×out] = x[n×in] · W[out×in]ᵀ
	d.be.Gemm(false, true, n, d.nout, d.nin, 1, x, d.nin, d.w.View(p), d.nin, 0, d.y, d.nout)
	addBias(d.y, d.b.View(p), n, 1, d.relu)
	return d.y
}

func (d *dense) backward(p, g, x, y, dy []float32, n int, needDx bool) []float32 {
	dy = dy[:n*d.nout]
	if d.relu {
		reluGrad(dy, dy, y)
	}
	// dW[out×in] = dy[n×out]ᵀ · x[n×in]
	d.be.Gemm(true, false, d.nout, d.nin, n, 1, dy, d.nout, x, d.nin, 0, d.w.View(g), d.nin)
	db := d.b.View(g)
	clear(db)
	for i := range n {
		row := dy[i*d.nout : (i+1)*d.nout]
		for j, v := range row {
			db[j] += v
		}
	}
	if !needDx {
		return nil
	}
	// dx[n×in] = dy[n×out] · W[out×in]
	d.dx = grow(d.dx, n*d.nin)
	d.be.Gemm(false, false, n, d.nin, d.nout, 1, dy, d.nout, d.w.View(p), d.nin, 0, d.dx, d.nin)
	return d.dx
}

// addBias adds b[c] to each of the hw values of channel c of each of the n
// samples of y (laid out n × len(b) × hw), then applies a ReLU if relu.
func addBias(y, b []float32, n, hw int, relu bool) {
	nc := len(b)
	if hw == 1 {
		for s := range n {
			row := y[s*nc : (s+1)*nc]
			b := b[:len(row)]
			if relu {
				for i, v := range row {
					row[i] = max(v+b[i], 0)
				}
			} else {
				for i := range row {
					row[i] += b[i]
				}
			}
		}
		return
	}
	for s := range n {
		for c, bc := range b {
			row := y[(s*nc+c)*hw : (s*nc+c+1)*hw]
			if relu {
				// max(v+bc, 0) by a conditional move on the bits
				// (as reluGrad), about 15% faster than max; a NaN
				// stays NaN, as with max.
				for i, v := range row {
					v += bc
					d := math.Float32bits(v)
					if v < 0 {
						d = 0
					}
					row[i] = math.Float32frombits(d)
				}
			} else {
				for i := range row {
					row[i] += bc
				}
			}
		}
	}
}
