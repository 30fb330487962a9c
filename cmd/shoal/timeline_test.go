package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/timeline"
)

// TestTimelineOfEveryProcess runs shoal train --timeline in ring and sync
// mode and reads the merged trace: one valid trace-event document whose
// spans all fall inside the run as this test's clock saw it, with every
// span kind of its role on every process's track.
func TestTimelineOfEveryProcess(t *testing.T) {
	ring := []string{"data", "forward", "backward", "allreduce bucket", "optimizer step"}
	psWorker := []string{"data", "forward", "backward", "pull", "push", "barrier wait"}
	shard := []string{"push-pull", "barrier wait", "optimizer step"}
	for _, tc := range []struct {
		mode           string
		servers        int
		worker, server []string
	}{
		{"ring", 0, ring, nil},
		{"sync", 2, psWorker, shard},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			dir := t.TempDir()
			// An earlier run's file in the folder is not merged into this
			// one's (it was: the count of processes below caught it).
			stale, err := timeline.Create(filepath.Join(dir, "worker-7.json"), "worker 7", 8)
			require.NoError(t, err)
			require.NoError(t, stale.Close())
			args := []string{"train", "--mode", tc.mode, "--workers", "2", "--steps", "50", "--dataset", "synthetic", "--hidden", "32", "--timeline", dir}
			if tc.servers > 0 {
				args = append(args, "--servers", "2")
			}
			before := time.Now()
			out, err := exec.CommandContext(ctxT(t, 2*time.Minute), shoalBin, args...).CombinedOutput()
			after := time.Now()
			require.NoError(t, err, "%s", out)
			merged := filepath.Join(dir, "timeline.json")
			assert.Contains(t, string(out), "timeline: "+merged)
			tr, dropped, err := timeline.ReadFile(merged)
			require.NoError(t, err)
			require.Zero(t, dropped)

			names := map[int]string{}
			kinds := map[int]map[string]int{}
			for _, e := range tr.TraceEvents {
				switch e.Ph {
				case "M":
					if e.Name == "process_name" {
						names[e.Pid], _ = e.Args["name"].(string)
					}
				case "X":
					if kinds[e.Pid] == nil {
						kinds[e.Pid] = map[string]int{}
					}
					kinds[e.Pid][e.Name]++
					start, end := e.Ts, e.Ts+e.Dur
					assert.True(t, start >= float64(before.UnixMicro()) && end <= float64(after.UnixMicro())+1,
						"%s's %s span [%.0f, %.0f] µs lies outside the run [%d, %d]: not one clock", names[e.Pid], e.Name, start, end, before.UnixMicro(), after.UnixMicro())
				default:
					t.Errorf("event of phase %q: %+v", e.Ph, e)
				}
			}
			require.Len(t, names, 2+tc.servers, "processes: %v", names)
			for pid, name := range names {
				want := tc.worker
				if strings.HasPrefix(name, "ps ") {
					want = tc.server
				}
				for _, k := range want {
					assert.Positive(t, kinds[pid][k], "%s's track has no %q span: %v", name, k, kinds[pid])
				}
				if !strings.HasPrefix(name, "ps ") {
					assert.Equal(t, 50, kinds[pid]["forward"], "%s: one forward span per step", name)
				}
			}
		})
	}
}
