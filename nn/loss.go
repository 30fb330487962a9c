package nn

import (
	"fmt"
	"math"
)

// softmaxCE is the softmax cross-entropy loss of a batch of logits against
// integer labels: per sample, logsumexp(z) - z[label], computed stably
// (shifted by the row's maximum) in float64.
type softmaxCE struct {
	classes int
	dz      []float32
}

func newSoftmaxCE(classes int) *softmaxCE { return &softmaxCE{classes: classes} }

// forward returns the summed loss over the n = len(labels) rows of z
// (n×classes) and how many rows have their label as the (first) largest
// logit. With grad it also leaves in dz the gradient of the mean loss,
// (softmax(z) - onehot(label)) / n, and returns it; else it returns nil.
// It panics if a label is outside [0, classes).
func (l *softmaxCE) forward(z []float32, labels []int32, grad bool) (lossSum float64, correct int, dz []float32) {
	nc := l.classes
	n := len(labels)
	if grad {
		l.dz = grow(l.dz, n*nc)
	}
	inv := 1 / float64(n)
	for s, lab := range labels {
		if lab < 0 || int(lab) >= nc {
			panic(fmt.Sprintf("nn: label %d of sample %d is outside [0, %d)", lab, s, nc))
		}
		row := z[s*nc : (s+1)*nc]
		arg := 0
		for j, v := range row {
			if v > row[arg] {
				arg = j
			}
		}
		if arg == int(lab) {
			correct++
		}
		m := float64(row[arg])
		var sum float64
		for _, v := range row {
			sum += math.Exp(float64(v) - m)
		}
		lse := m + math.Log(sum)
		lossSum += lse - float64(row[lab])
		if grad {
			d := l.dz[s*nc : (s+1)*nc]
			for j, v := range row {
				q := math.Exp(float64(v) - lse)
				if j == int(lab) {
					q--
				}
				d[j] = float32(q * inv)
			}
		}
	}
	if !grad {
		return lossSum, correct, nil
	}
	return lossSum, correct, l.dz
}
