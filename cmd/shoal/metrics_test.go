package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/internal/lockedio"
	"github.com/shoalml/shoal/metrics"
)

// metricsRun is a shoal train --metrics run that goes on until stopped.
type metricsRun struct {
	cmd    *exec.Cmd
	stderr *lockedio.Buffer
	// urls are the endpoints train printed, by child name ("ps 0",
	// "worker 1").
	urls map[string]string
}

// startMetricsRun starts shoal train --metrics with args for a run far
// longer than the test and waits until it has printed the endpoints of
// its servers servers and workers workers. Cleanup interrupts it.
func startMetricsRun(t *testing.T, ctx context.Context, servers, workers int, args ...string) *metricsRun {
	t.Helper()
	args = append([]string{"train", "--metrics", "--dataset", "synthetic", "--hidden", "32", "--batch", "16", "--steps", "100000000",
		"--servers", strconv.Itoa(servers), "--workers", strconv.Itoa(workers)}, args...)
	r := &metricsRun{cmd: exec.Command(shoalBin, args...), stderr: lockedio.NewBuffer(), urls: map[string]string{}}
	r.cmd.Stderr = r.stderr
	out, err := r.cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, r.cmd.Start())
	lines := make(chan string)
	go func() {
		defer close(lines)
		for sc := bufio.NewScanner(out); sc.Scan(); {
			lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		_ = r.cmd.Process.Signal(syscall.SIGINT)
		for range lines {
		}
		_ = r.cmd.Wait()
	})
	for len(r.urls) < servers+workers {
		select {
		case l, ok := <-lines:
			require.True(t, ok, "train exited early; stderr:\n%s", r.stderr)
			// "metrics: worker 1 at http://127.0.0.1:40000/metrics"
			if name, u, ok := strings.Cut(strings.TrimPrefix(l, "metrics: "), " at "); ok && strings.HasPrefix(l, "metrics: ") {
				r.urls[name] = u
			}
		case <-ctx.Done():
			t.Fatalf("train printed %d of %d metrics endpoints before the deadline; stderr:\n%s", len(r.urls), servers+workers, r.stderr)
		}
	}
	go func() { // the rest of the output, so train never blocks on it
		for range lines {
		}
	}()
	return r
}

// scrapeURL reads an endpoint's metrics as Prometheus would.
func scrapeURL(t *testing.T, u string) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := metrics.Scrape(u, 10*time.Second)
	require.NoError(t, err)
	return fams
}

// poll calls try every 50 ms until it returns true or ctx ends.
func poll(ctx context.Context, try func() bool) bool {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !try() {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// counterSum is the sum of a counter family's series (0 if absent).
func counterSum(f *dto.MetricFamily) float64 {
	var s float64
	for _, m := range f.GetMetric() {
		s += m.GetCounter().GetValue()
	}
	return s
}

// TestEveryChildServesItsMetrics runs shoal train --metrics in sync mode
// and reads every server's and worker's endpoint mid-run.
func TestEveryChildServesItsMetrics(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	r := startMetricsRun(t, ctx, 2, 2, "--mode", "sync", "--checkpoint-dir", t.TempDir(), "--checkpoint-every", "50")
	require.Len(t, r.urls, 4, "%v", r.urls)
	var fams map[string]*dto.MetricFamily
	ok := poll(ctx, func() bool {
		fams = scrapeURL(t, r.urls["worker 0"])
		return counterSum(fams["shoal_worker_steps_total"]) >= 60
	})
	require.True(t, ok, "worker 0 counted no 60 steps before the deadline; stderr:\n%s", r.stderr)
	for _, name := range []string{"shoal_worker_samples_total", "shoal_worker_phase_seconds", "shoal_worker_sent_bytes_total",
		"shoal_worker_received_bytes_total", "shoal_worker_dropped_pushes_total", "go_goroutines", "process_resident_memory_bytes"} {
		assert.Contains(t, fams, name, "worker 0's metrics")
	}
	phases := map[string]bool{}
	for _, m := range fams["shoal_worker_phase_seconds"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "phase" && m.GetHistogram().GetSampleCount() > 0 {
				phases[l.GetValue()] = true
			}
		}
	}
	assert.Len(t, phases, 7, "every phase observed: %v", phases)
	assert.Positive(t, counterSum(fams["shoal_worker_sent_bytes_total"]))
	assert.Equal(t, 16*counterSum(fams["shoal_worker_steps_total"]), counterSum(fams["shoal_worker_samples_total"]))

	ps := scrapeURL(t, r.urls["ps 1"])
	for _, name := range []string{"shoal_ps_steps_total", "shoal_ps_pushes_total", "shoal_ps_pulls_total", "shoal_ps_pull_wait_seconds",
		"shoal_ps_rejected_pushes_total", "shoal_ps_push_staleness_steps", "shoal_ps_live_workers", "shoal_ps_membership_changes_total",
		"shoal_ps_checkpoint_age_seconds", "grpc_server_handled_total", "grpc_server_handling_seconds", "shoal_grpc_server_received_bytes_total"} {
		assert.Contains(t, ps, name, "ps 1's metrics")
	}
	assert.Positive(t, counterSum(ps["shoal_ps_steps_total"]))
	assert.Positive(t, counterSum(ps["shoal_grpc_server_received_bytes_total"]))
	assert.Equal(t, "1", ps["shoal_ps_steps_total"].GetMetric()[0].GetLabel()[0].GetValue(), "labelled with its shard")
}

// TestPrometheusScrapesARun has a real Prometheus server (Debian's
// prometheus package) scrape a shoal train run and asks it, through its
// HTTP API, for the rate of samples the workers train.
func TestPrometheusScrapesARun(t *testing.T) {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		if os.Getenv("SHOAL_REQUIRE_PROMETHEUS") != "" {
			t.Fatal("prometheus not found and SHOAL_REQUIRE_PROMETHEUS is set")
		}
		t.Skip("SKIPPED: the prometheus binary is not installed (apt-get install prometheus)")
	}
	ctx := ctxT(t, 3*time.Minute)
	r := startMetricsRun(t, ctx, 1, 2, "--mode", "async")
	var targets []string
	for _, u := range r.urls {
		pu, err := url.Parse(u)
		require.NoError(t, err)
		targets = append(targets, strconv.Quote(pu.Host))
	}
	dir := t.TempDir()
	conf := fmt.Sprintf("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: shoal\n    static_configs:\n      - targets: [%s]\n",
		strings.Join(targets, ", "))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(conf), 0o644))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	web := lis.Addr().String()
	lis.Close()
	prom := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+web, "--log.level=warn")
	promErr := lockedio.NewBuffer()
	prom.Stdout, prom.Stderr = promErr, promErr
	require.NoError(t, prom.Start())
	t.Cleanup(func() {
		_ = prom.Process.Signal(syscall.SIGTERM)
		_ = prom.Wait()
	})

	// Prometheus needs two scrapes of each worker for a rate.
	query := "sum(rate(shoal_worker_samples_total[10s]))"
	var rate float64
	var last string
	ok := poll(ctx, func() bool {
		resp, err := http.Get("http://" + web + "/api/v1/query?query=" + url.QueryEscape(query))
		if err != nil {
			last = err.Error()
			return false // not up yet
		}
		defer resp.Body.Close()
		var ans struct {
			Status string
			Data   struct {
				Result []struct {
					Value [2]any
				}
			}
		}
		if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil || ans.Status != "success" || len(ans.Data.Result) != 1 {
			last = fmt.Sprintf("status %s, %+v, %v", resp.Status, ans, err)
			return false
		}
		s, _ := ans.Data.Result[0].Value[1].(string)
		rate, err = strconv.ParseFloat(s, 64)
		last = s
		return err == nil && rate > 0
	})
	require.True(t, ok, "Prometheus gave no positive %s before the deadline (last answer: %s); prometheus:\n%s\ntrain:\n%s", query, last, promErr, r.stderr)
	t.Logf("Prometheus: %s = %.0f samples/s", query, rate)
	up := scrapeURL(t, "http://"+web+"/metrics") // Prometheus's own: it scraped every target
	assert.Positive(t, counterSum(up["prometheus_tsdb_head_samples_appended_total"]))
}
