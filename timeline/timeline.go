// Package timeline writes what a Shoal process does, step by step, as
// Chrome trace-event JSON: the format chrome://tracing and Perfetto
// (ui.perfetto.dev) open, as Horovod's timeline does. Each process is one
// track (pid), each of its goroutines that records spans one row (tid).
// Times are wall-clock microseconds since the Unix epoch, so the files of
// processes on one machine share one clock and Merge only concatenates
// them.
//
// A nil *Writer records nothing: code that traces calls its methods
// unconditionally, and an untraced run pays one nil check per span.
package timeline

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"
)

// Writer appends spans to one trace file. It is safe for concurrent use.
type Writer struct {
	mu    sync.Mutex
	f     *os.File
	bw    *bufio.Writer
	pid   int
	buf   []byte
	first bool
	err   error
}

// How a trace file begins and ends.
const (
	header = `{"displayTimeUnit":"ms","traceEvents":[` + "\n"
	footer = "\n]}\n"
)

// Arg is one named integer a span carries (its step, its bytes).
type Arg struct {
	Key string
	Val int64
}

// Create starts the trace file path for one process, named process on
// its track (e.g. "worker 1"); pid tells the processes of a merged
// trace apart (the OS's process id will do).
func Create(path, process string, pid int) (*Writer, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("timeline: %w", err)
	}
	w := &Writer{f: f, bw: bufio.NewWriterSize(f, 64<<10), pid: pid, first: true}
	w.bw.WriteString(header)
	w.meta(0, "process_name", process)
	return w, nil
}

// Thread names row tid of the process's track.
func (w *Writer) Thread(tid int, name string) {
	if w == nil {
		return
	}
	w.meta(tid, "thread_name", name)
}

func (w *Writer) meta(tid int, kind, name string) {
	n, _ := json.Marshal(name)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = w.sep(w.buf[:0])
	w.buf = fmt.Appendf(w.buf, `{"name":%q,"ph":"M","pid":%d,"tid":%d,"args":{"name":%s}}`, kind, w.pid, tid, n)
	w.write()
}

// Span records name on row tid, from start for d, with args. Names are
// Shoal's own constants (no escaping is done beyond JSON's quotes).
func (w *Writer) Span(tid int, name string, start time.Time, d time.Duration, args ...Arg) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	b := w.sep(w.buf[:0])
	b = append(b, `{"name":`...)
	b = strconv.AppendQuote(b, name)
	b = append(b, `,"ph":"X","ts":`...)
	b = appendMicros(b, start.UnixNano())
	b = append(b, `,"dur":`...)
	b = appendMicros(b, max(d.Nanoseconds(), 0))
	b = append(b, `,"pid":`...)
	b = strconv.AppendInt(b, int64(w.pid), 10)
	b = append(b, `,"tid":`...)
	b = strconv.AppendInt(b, int64(tid), 10)
	if len(args) > 0 {
		b = append(b, `,"args":{`...)
		for i, a := range args {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendQuote(b, a.Key)
			b = append(b, ':')
			b = strconv.AppendInt(b, a.Val, 10)
		}
		b = append(b, '}')
	}
	w.buf = append(b, '}')
	w.write()
}

// Since records name on row tid from start until now.
func (w *Writer) Since(tid int, name string, start time.Time, args ...Arg) {
	if w == nil {
		return
	}
	w.Span(tid, name, start, time.Since(start), args...)
}

// appendMicros appends ns as microseconds with three decimals.
func appendMicros(b []byte, ns int64) []byte {
	b = strconv.AppendInt(b, ns/1000, 10)
	frac := ns % 1000
	return append(b, '.', byte('0'+frac/100), byte('0'+frac/10%10), byte('0'+frac%10))
}

// sep starts an event: a comma and newline after the previous one.
func (w *Writer) sep(b []byte) []byte {
	if w.first {
		w.first = false
		return b
	}
	return append(b, ",\n"...)
}

// write flushes w.buf to the file's buffer; the first error sticks and
// Close returns it. After Close it drops the event.
func (w *Writer) write() {
	if w.err == nil && w.f != nil {
		_, w.err = w.bw.Write(w.buf)
	}
}

// Close ends the JSON document and closes the file; it returns the first
// error writing met. Spans recorded after Close are dropped.
func (w *Writer) Close() error {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return w.err
	}
	if w.err == nil {
		_, w.err = w.bw.WriteString(footer)
	}
	if w.err == nil {
		w.err = w.bw.Flush()
	}
	if err := w.f.Close(); w.err == nil {
		w.err = err
	}
	w.f = nil
	return w.err
}

// Event is one trace event as Read returns it.
type Event struct {
	Name string         `json:"name"`
	Ph   string         `json:"ph"`
	Ts   float64        `json:"ts"`
	Dur  float64        `json:"dur"`
	Pid  int            `json:"pid"`
	Tid  int            `json:"tid"`
	Args map[string]any `json:"args,omitempty"`
}

// Trace is a trace file's content.
type Trace struct {
	DisplayTimeUnit string  `json:"displayTimeUnit"`
	TraceEvents     []Event `json:"traceEvents"`
}

// Read parses a trace file, checking it is one JSON document.
func Read(r io.Reader) (Trace, error) {
	var t Trace
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		return Trace{}, fmt.Errorf("timeline: not a trace-event JSON document: %w", err)
	}
	if dec.More() {
		return Trace{}, errors.New("timeline: data after the trace's JSON document")
	}
	return t, nil
}

// ReadFile reads the trace at path. The file of a process that was
// killed ends without its closing brackets, possibly mid-event, or holds
// no event at all (it was killed before it first wrote out, and the file
// may be empty): ReadFile keeps the events written whole before that, and
// says how many bytes it dropped (0 for a complete file, which holds at
// least its process's name).
func ReadFile(path string) (t Trace, dropped int, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Trace{}, 0, fmt.Errorf("timeline: %w", err)
	}
	t, err = Read(bytes.NewReader(b))
	if err == nil {
		return t, 0, nil
	}
	if bytes.HasPrefix([]byte(header), b) {
		return Trace{}, len(b), nil // no event written out
	}
	if !bytes.HasPrefix(b, []byte(header)) {
		return Trace{}, 0, fmt.Errorf("%s: %w", path, err)
	}
	// Events are written one per line, separated by ",\n".
	cut := bytes.LastIndex(b, []byte("},\n"))
	if cut < 0 {
		return Trace{}, len(b), nil // not one event whole
	}
	fixed := append(b[:cut+1:cut+1], footer...)
	t, rerr := Read(bytes.NewReader(fixed))
	if rerr != nil {
		return Trace{}, 0, fmt.Errorf("%s: %w", path, err)
	}
	return t, len(b) - cut - 1, nil
}

// Merge writes the events of every file in files, in order, into one
// trace at out: the processes' tracks side by side on their shared clock.
// A file cut short (its process was killed), even one left empty,
// contributes the events it holds whole; truncated names those files.
func Merge(out string, files []string) (truncated []string, err error) {
	var all Trace
	all.DisplayTimeUnit = "ms"
	for _, path := range files {
		t, dropped, err := ReadFile(path)
		if err != nil {
			return nil, err
		}
		if dropped > 0 || len(t.TraceEvents) == 0 {
			truncated = append(truncated, path)
		}
		all.TraceEvents = append(all.TraceEvents, t.TraceEvents...)
	}
	b, err := json.Marshal(all)
	if err != nil {
		return nil, err
	}
	return truncated, os.WriteFile(out, append(b, '\n'), 0o644)
}
