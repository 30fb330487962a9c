package nn

import (
	"log/slog"
)

// A device model's steps as graphs, on a device that can capture them
// (Capturer): a step of a shape seen once runs op by op (its first run
// warms the libraries up: cuBLAS picks and loads its kernels outside a
// capture), the second time it is captured with its uploads and
// downloads, and from then on the graph is replayed, one launch instead
// of one per kernel, GEMM and copy. A capture that fails, or a device
// that cannot capture, turns graphs off for the model and the steps run
// op by op, said once in the log.

// graphOp is which step a graph holds.
type graphOp uint8

const (
	opForwardBackward graphOp = iota
	opEvaluate
	opTrainStep
	opTrainPass // TrainStep's pass under FP16: the update waits for the overflow check
	// ForwardBackward's and Evaluate's steps in a resident run (resident.go):
	// without the weights' upload.
	opResidentPass
	opResidentEvaluate
)

// graphKey is what a captured step depends on beyond the model's buffers
// (which stay while the batch size does): the step, its batch and the
// values its kernels take as arguments.
type graphKey struct {
	op        graphOp
	n         int
	scale     float32 // FP16's loss scale
	lr, mu    float32 // TrainStep's
	kept      bool    // TrainKept's: no uploads
	precision Precision
}

// maxGraphs bounds the graphs a model keeps (its steps, evaluation's
// batch sizes, a few FP16 loss scales): past it, all are released.
const maxGraphs = 8

// transfer is one copy of a step: host memory and the device memory it
// goes to (an upload) or comes from (a download).
type transfer struct {
	host []byte
	dev  Mem
}

// SetGraphs turns graph capture on (the default where the device is a
// Capturer) or off, releasing the graphs captured so far; log (nil:
// discard) hears once why graphs are off when a capture fails.
func (m *DeviceModel) SetGraphs(on bool, log *slog.Logger) {
	m.releaseGraphs()
	m.graphLog = log
	_, capturer := m.dev.(Capturer)
	switch {
	case !on:
		m.graphsOff = "turned off"
	case !capturer:
		m.graphsOff = m.dev.Name() + " does not capture graphs"
	default:
		m.graphsOff = ""
	}
}

// Graphs says how many steps were replayed as graphs so far, and why
// graphs are off ("" while they are on).
func (m *DeviceModel) Graphs() (replays int, off string) { return m.replays, m.graphsOff }

// releaseGraphs releases every captured graph.
func (m *DeviceModel) releaseGraphs() {
	if c, ok := m.dev.(Capturer); ok {
		for _, g := range m.graphs {
			if g != nil {
				c.Release(g)
			}
		}
	}
	clear(m.graphs)
}

// step queues one step: the uploads, compute (which queues the kernels
// and GEMMs) and the downloads, in that order, op by op or as the graph
// captured for key; the caller then syncs. A graph keeps the device
// memory of each transfer and the host memory's length: key must say
// whatever else changes the operations compute queues.
func (m *DeviceModel) step(key graphKey, ups, downs []transfer, compute func()) {
	c, ok := m.dev.(Capturer)
	if !ok || m.graphsOff != "" {
		m.eager(ups, downs, compute)
		return
	}
	g, seen := m.graphs[key]
	switch {
	case g != nil:
		m.replay(c, g, ups, downs)
		return
	case !seen:
		if len(m.graphs) >= maxGraphs {
			m.releaseGraphs()
		}
		if m.graphs == nil {
			m.graphs = map[graphKey]Graph{}
		}
		m.graphs[key] = nil // seen: captured next time
		m.eager(ups, downs, compute)
		return
	}
	if err := c.BeginCapture(); err != nil {
		m.noGraphs(err)
		m.eager(ups, downs, compute)
		return
	}
	m.eager(ups, downs, compute) // recorded, not run
	g, err := c.EndCapture()
	if err != nil {
		m.noGraphs(err)
		m.eager(ups, downs, compute)
		return
	}
	m.graphs[key] = g
	m.replay(c, g, ups, downs)
}

// eager queues the step op by op.
func (m *DeviceModel) eager(ups, downs []transfer, compute func()) {
	for _, t := range ups {
		m.dev.Upload(t.dev, t.host)
	}
	compute()
	for _, t := range downs {
		m.dev.Download(t.host, t.dev)
	}
}

// replay queues graph g with the step's host memory.
func (m *DeviceModel) replay(c Capturer, g Graph, ups, downs []transfer) {
	m.upHosts, m.downHosts = m.upHosts[:0], m.downHosts[:0]
	for _, t := range ups {
		m.upHosts = append(m.upHosts, t.host)
	}
	for _, t := range downs {
		m.downHosts = append(m.downHosts, t.host)
	}
	c.Replay(g, m.upHosts, m.downHosts)
	m.replays++
}

// noGraphs turns graphs off for the model after err, and says so once.
func (m *DeviceModel) noGraphs(err error) {
	m.releaseGraphs()
	m.graphsOff = err.Error()
	if m.graphLog != nil {
		m.graphLog.Warn("CUDA graphs off: each step's kernels are launched one by one", "component", "nn", "device", m.dev.Name(), "why", m.graphsOff)
	}
}
