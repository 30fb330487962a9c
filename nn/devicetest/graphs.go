package devicetest

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/nn"
)

// graphSteps is how many steps of one shape each graph check takes: the
// first runs op by op, the second is captured and replayed, the rest
// replayed.
const graphSteps = 4

// Graphs runs the graph checks alone (Run runs them too): a test of a
// device's graphs that need not run the whole suite.
func Graphs(t *testing.T, dev nn.Device) { testGraphs(t, dev) }

// testGraphs checks, on a device that captures graphs (nn.Capturer),
// that a model whose steps are captured and replayed computes what one
// whose steps run op by op computes, bit for bit, step after step: the
// same kernels and GEMMs on the same data in the same order. On another
// device it checks that the model says why graphs are off.
func testGraphs(t *testing.T, dev nn.Device) {
	if _, ok := dev.(nn.Capturer); !ok {
		m, err := nn.NewOnDevice(nn.Spec{Arch: "mlp", Hidden: []int{8}}, dev)
		require.NoError(t, err)
		defer m.Close()
		_, off := m.Graphs()
		require.Contains(t, off, "does not capture graphs")
		return
	}
	for _, p := range []nn.Precision{nn.FP32, nn.BF16, nn.FP16} {
		for _, spec := range []nn.Spec{{Arch: "mlp", Hidden: []int{257, 31}}, {Arch: "cnn"}} {
			batch := 17
			if spec.Arch == "cnn" {
				batch = 3 // the emulator's convolutions are slow
			}
			t.Run(fmt.Sprintf("%s %s", p, spec.Arch), func(t *testing.T) { testGraphSteps(t, dev, spec, p, batch) })
		}
	}
}

// testGraphSteps runs ForwardBackward, Evaluate and the resident
// TrainStep graphSteps times each on two models of spec, one with graphs
// off, on new batches every step, and compares their results.
func testGraphSteps(t *testing.T, dev nn.Device, spec nn.Spec, p nn.Precision, batch int) {
	eager, graphs := onDevice(t, spec, dev, p), onDevice(t, spec, dev, p)
	eager.SetGraphs(false, nil)
	_, off := eager.Graphs()
	require.Equal(t, "turned off", off)
	size := eager.Layout().Size()
	params := make([]float32, size)
	eager.Init(params, 7)
	rng := rand.New(rand.NewPCG(31, 32))
	ge, gg := make([]float32, size), make([]float32, size)
	for step := range graphSteps {
		x, labels := randomBatch(rng, eager, batch)
		le, ce := eager.ForwardBackward(params, ge, x, labels)
		lg, cg := graphs.ForwardBackward(params, gg, x, labels)
		require.NoError(t, graphs.Err())
		require.Equal(t, le, lg, "ForwardBackward step %d: loss", step)
		require.Equal(t, ce, cg, "ForwardBackward step %d: correct", step)
		same(t, fmt.Sprintf("ForwardBackward step %d: gradients", step), ge, gg)
		// The next step's weights differ, as after a pull.
		for i := range params {
			params[i] -= 0.01 * ge[i]
		}
	}
	replays, off := graphs.Graphs()
	require.Empty(t, off, "graphs are on")
	require.Equal(t, graphSteps-1, replays, "every step but the first replayed")

	for step := range graphSteps {
		x, labels := randomBatch(rng, eager, batch)
		le, ce := eager.Evaluate(params, x, labels)
		lg, cg := graphs.Evaluate(params, x, labels)
		require.Equal(t, le, lg, "Evaluate step %d: loss", step)
		require.Equal(t, ce, cg, "Evaluate step %d: correct", step)
	}

	const lr, mu = 0.05, 0.9
	require.NoError(t, eager.Load(params))
	require.NoError(t, graphs.Load(params))
	for step := range graphSteps {
		x, labels := randomBatch(rng, eager, batch)
		le, ce := eager.TrainStep(x, labels, lr, mu)
		lg, cg := graphs.TrainStep(x, labels, lr, mu)
		require.NoError(t, graphs.Err())
		require.Equal(t, le, lg, "TrainStep step %d: loss", step)
		require.Equal(t, ce, cg, "TrainStep step %d: correct", step)
	}
	we, wg := make([]float32, size), make([]float32, size)
	require.NoError(t, eager.Store(we))
	require.NoError(t, graphs.Store(wg))
	same(t, "weights after TrainStep", we, wg)
	replays, _ = graphs.Graphs()
	require.Equal(t, 3*(graphSteps-1), replays, "ForwardBackward, Evaluate and TrainStep each replayed")
}
