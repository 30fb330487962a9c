package timeline_test

import (
	"bytes"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/timeline"
)

func TestSpansRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.json")
	w, err := timeline.Create(path, `worker "0"`, 42)
	require.NoError(t, err)
	w.Thread(1, "allreduce")
	start := time.Unix(1_700_000_000, 123_456_789)
	w.Span(0, "forward", start, 2500*time.Microsecond+7, timeline.Arg{Key: "step", Val: 3})
	w.Span(1, "allreduce bucket", start.Add(time.Millisecond), -time.Second) // a negative length is 0
	require.NoError(t, w.Close())
	w.Span(0, "late", start, time.Second) // after Close: dropped
	require.NoError(t, w.Close())

	tr, dropped, err := timeline.ReadFile(path)
	require.NoError(t, err)
	assert.Zero(t, dropped)
	require.Len(t, tr.TraceEvents, 4)
	assert.Equal(t, timeline.Event{Name: "process_name", Ph: "M", Pid: 42, Args: map[string]any{"name": `worker "0"`}}, tr.TraceEvents[0])
	assert.Equal(t, timeline.Event{Name: "thread_name", Ph: "M", Pid: 42, Tid: 1, Args: map[string]any{"name": "allreduce"}}, tr.TraceEvents[1])
	f := tr.TraceEvents[2]
	assert.Equal(t, "forward", f.Name)
	assert.Equal(t, "X", f.Ph)
	assert.InDelta(t, 1_700_000_000_123_456.789, f.Ts, 0.01)
	assert.InDelta(t, 2500.007, f.Dur, 1e-9)
	assert.Equal(t, map[string]any{"step": 3.0}, f.Args)
	assert.Equal(t, 1, tr.TraceEvents[3].Tid)
	assert.Zero(t, tr.TraceEvents[3].Dur)
}

func TestANilWriterRecordsNothing(t *testing.T) {
	var w *timeline.Writer
	w.Thread(0, "x")
	w.Span(0, "x", time.Now(), time.Second)
	w.Since(0, "x", time.Now())
	assert.NoError(t, w.Close())
}

// A killed process leaves its file cut short, possibly mid-event: the
// whole events before the cut are kept.
func TestACutFileKeepsItsWholeEvents(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.json")
	w, err := timeline.Create(path, "ps 0", 7)
	require.NoError(t, err)
	for i := range 3 {
		w.Span(0, "push", time.Unix(100, 0), time.Duration(i+1)*time.Microsecond)
	}
	require.NoError(t, w.Close())
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	cut := b[:len(b)-30] // into the last event
	require.NoError(t, os.WriteFile(path, cut, 0o644))
	tr, dropped, err := timeline.ReadFile(path)
	require.NoError(t, err)
	assert.Positive(t, dropped)
	assert.Len(t, tr.TraceEvents, 3, "the process name and two whole spans")

	require.NoError(t, os.WriteFile(path, []byte(`{"traceEvents":[{"name":`), 0o644))
	_, _, err = timeline.ReadFile(path)
	assert.ErrorContains(t, err, "not a trace-event JSON document")
}

func TestMergePutsTheProcessesOnOneTrace(t *testing.T) {
	dir := t.TempDir()
	var files []string
	var wg sync.WaitGroup
	for i := range 2 {
		path := filepath.Join(dir, "p"+string(rune('0'+i))+".json")
		files = append(files, path)
		w, err := timeline.Create(path, "p", 100+i)
		require.NoError(t, err)
		for g := range 4 { // concurrent writers on one file
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 50 {
					w.Since(g, "span", time.Now())
				}
			}()
		}
		wg.Wait()
		require.NoError(t, w.Close())
	}
	out := filepath.Join(dir, "all.json")
	truncated, err := timeline.Merge(out, files)
	require.NoError(t, err)
	assert.Empty(t, truncated)
	tr, _, err := timeline.ReadFile(out)
	require.NoError(t, err)
	pids := map[int]int{}
	for _, e := range tr.TraceEvents {
		if e.Ph == "X" {
			pids[e.Pid]++
		}
	}
	assert.Equal(t, map[int]int{100: 200, 101: 200}, pids)
}

// TestMergeTakesAProcessKilledBeforeItWroteOut: a process killed before
// its first write leaves an empty file (the writer buffers), or one cut
// inside its first event. Merge takes the other processes' events and
// names it as ended early; before, it failed, and with it a shoal train
// run that had gone on without that worker.
func TestMergeTakesAProcessKilledBeforeItWroteOut(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "ps-0.json")
	w, err := timeline.Create(good, "ps 0", 1)
	require.NoError(t, err)
	w.Span(1, "push", time.Unix(100, 0), time.Millisecond)
	require.NoError(t, w.Close())
	empty := filepath.Join(dir, "worker-1.json")
	_, err = timeline.Create(empty, "worker 1", 2) // never written out: killed
	require.NoError(t, err)
	cut := filepath.Join(dir, "worker-2.json")
	b, err := os.ReadFile(good)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(cut, b[:bytes.Index(b, []byte("\n"))+10], 0o644)) // the header and part of an event

	out := filepath.Join(dir, "timeline.json")
	truncated, err := timeline.Merge(out, []string{good, empty, cut})
	require.NoError(t, err)
	assert.Equal(t, []string{empty, cut}, truncated)
	tr, _, err := timeline.ReadFile(out)
	require.NoError(t, err)
	assert.Len(t, tr.TraceEvents, 2, "ps 0's name and its span")
}
