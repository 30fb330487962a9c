//go:build cgo

package gpu

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/shoalml/shoal/nn"
)

// A captured graph (nn.Capturer): the driver's graph and its executable
// instance, and the pinned host memory its copies read and write, one
// buffer per Upload and per Download in the order they were queued. The
// executor owns all of it; callers hold it as an nn.Graph.
type graph struct {
	dev        *Device
	g, exec    unsafe.Pointer
	ups, downs [][]byte
	// launched: replayed since the executor's last Sync, so its host
	// memory is in use.
	launched bool
}

var _ nn.Capturer = (*Device)(nil)

// pinned returns n bytes of pinned memory for the graph's copy, appended
// to list.
func (g *graph) pinned(l *libs, n int, list *[][]byte) ([]byte, error) {
	b, err := l.hostAlloc(n)
	if err != nil {
		return nil, fmt.Errorf("pinned host memory of %d bytes for a graph: %w", n, err)
	}
	*list = append(*list, b)
	return b, nil
}

// free releases what the graph holds.
func (g *graph) free(l *libs) {
	if g.exec != nil {
		l.graphExecDestroy(g.exec)
	}
	if g.g != nil {
		l.graphDestroy(g.g)
	}
	for _, b := range append(g.ups, g.downs...) {
		l.hostFree(b)
	}
	g.exec, g.g, g.ups, g.downs = nil, nil, nil, nil
}

// BeginCapture starts capturing the stream (nn.Capturer). It fails where
// the driver lacks the graph functions (ErrNoGraphs) or an error is
// pending.
func (d *Device) BeginCapture() error {
	if err := d.l.graphsErr(); err != nil {
		return err
	}
	return d.call(func() error {
		switch {
		case d.err != nil:
			return fmt.Errorf("gpu: BeginCapture: an error is pending: %w", d.err)
		case d.capture != nil:
			return errors.New("gpu: BeginCapture: already capturing")
		}
		if err := d.l.beginCapture(d.stream); err != nil {
			return fmt.Errorf("gpu: cuStreamBeginCapture: %w", err)
		}
		d.capture = &graph{dev: d}
		return nil
	})
}

// EndCapture ends the capture and instantiates the graph (nn.Capturer).
// An operation that failed while capturing fails the capture, not the
// device: none of them ran.
func (d *Device) EndCapture() (nn.Graph, error) {
	var out *graph
	err := d.call(func() error {
		c := d.capture
		if c == nil {
			return errors.New("gpu: EndCapture without BeginCapture")
		}
		d.capture = nil
		g, err := d.l.endCapture(d.stream)
		c.g = g
		if err == nil && d.err != nil {
			err = d.err
		}
		if err == nil {
			c.exec, err = d.l.instantiate(g)
		}
		if err != nil {
			c.free(d.l)
			if d.sticky == nil {
				d.err = nil
			}
			return fmt.Errorf("gpu: capturing a graph on %s: %w", d.Name(), err)
		}
		out = c
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// graphOf returns g as this device's graph, or panics.
func (d *Device) graphOf(op string, g nn.Graph) *graph {
	gr, ok := g.(*graph)
	if !ok || gr.dev != d {
		panic(fmt.Sprintf("gpu: %s: %T is not a graph of %s", op, g, d.Name()))
	}
	return gr
}

// Replay queues one launch of g (nn.Capturer), at most once between two
// Syncs: its host memory holds one step's copies.
func (d *Device) Replay(g nn.Graph, ups, downs [][]byte) {
	gr := d.graphOf("Replay", g)
	if len(ups) != len(gr.ups) || len(downs) != len(gr.downs) {
		panic(fmt.Sprintf("gpu: Replay: %d uploads and %d downloads for a graph of %d and %d", len(ups), len(downs), len(gr.ups), len(gr.downs)))
	}
	for i, u := range ups {
		if len(u) != len(gr.ups[i]) {
			panic(fmt.Sprintf("gpu: Replay: upload %d of %d bytes, captured with %d", i, len(u), len(gr.ups[i])))
		}
	}
	for i, dn := range downs {
		if len(dn) != len(gr.downs[i]) {
			panic(fmt.Sprintf("gpu: Replay: download %d of %d bytes, captured with %d", i, len(dn), len(gr.downs[i])))
		}
	}
	d.queue(func() error {
		if gr.launched {
			return errors.New("gpu: Replay: a graph replayed twice without a Sync between")
		}
		for i, u := range ups {
			copy(gr.ups[i], u)
		}
		for i, dn := range downs {
			d.pending = append(d.pending, download{dn, gr.downs[i]})
		}
		gr.launched = true
		d.replayed = append(d.replayed, gr)
		return d.l.graphLaunch(gr.exec, d.stream)
	})
}

// Release frees g (nn.Capturer), after its launch if one is in flight.
func (d *Device) Release(g nn.Graph) {
	gr := d.graphOf("Release", g)
	d.work <- func() {
		if gr.launched {
			_ = d.l.streamSync(d.stream) // an error stays for Sync to report
		}
		gr.free(d.l)
	}
}
