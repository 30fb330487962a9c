package deploy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestRealSlurm runs shoal.sbatch on a real Slurm cluster that
// slurm/testdata/minicluster.sh starts on this host (munged, slurmctld and
// two slurmd on loopback; Debian's slurm-wlm and munge, as root). Four
// jobs at once: a sync PS run and a ring run to their end, a sync PS run
// cancelled the documented way (scancel --batch --signal=TERM), and an
// async PS run that Slurm's --signal=B:TERM stops before its time limit
// (--time=2: about a minute in all).
// Each ends with rank 0's test line; the stopped PS runs' shards write
// their shutdown checkpoint. It skips, saying why, where the cluster cannot
// start, and fails instead with SHOAL_REQUIRE_SLURM=1.
func TestRealSlurm(t *testing.T) {
	unable := t.Skipf
	if os.Getenv("SHOAL_REQUIRE_SLURM") == "1" {
		unable = t.Fatalf
	}
	for _, p := range []string{"munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "scontrol", "sinfo"} {
		if _, err := exec.LookPath(p); err != nil {
			unable("no real Slurm here: %s is not installed (apt-get install slurm-wlm munge)", p)
		}
	}
	if os.Geteuid() != 0 {
		unable("no real Slurm here: the one-host cluster runs as root (SlurmUser=root), and this test is uid %d", os.Geteuid())
	}
	if testing.Short() {
		t.Skip("-short: a real Slurm cluster takes about a minute")
	}
	bin := buildShoal(t)
	c := startMinicluster(t, unable)

	type job struct {
		name string
		env  []string
		args []string
		stop func(t *testing.T, id string) // nil: runs to its end
		ckpt string
	}
	ports := freePorts(t, 12)
	ckCancel, ckLimit := filepath.Join(c.dir, "ck-cancel"), filepath.Join(c.dir, "ck-limit")
	jobs := []*job{
		{name: "sync", env: []string{"SHOAL_MODE=sync", "SHOAL_STEPS=40", psPorts(ports)}},
		{name: "ring", env: []string{"SHOAL_MODE=ring", "SHOAL_STEPS=40", "SHOAL_MASTER_PORT=" + strconv.Itoa(ports+4)}},
		{name: "cancel", env: []string{"SHOAL_MODE=sync", "SHOAL_STEPS=100000000", psPorts(ports + 5), "SHOAL_CHECKPOINT_DIR=" + ckCancel},
			ckpt: ckCancel, stop: func(t *testing.T, id string) {
				// The cancel deploy/README documents.
				if out, err := c.command("scancel", "--batch", "--signal=TERM", id).CombinedOutput(); err != nil {
					t.Errorf("scancel --batch --signal=TERM %s: %v\n%s", id, err, out)
				}
			}},
		// --time=2 (minutes) with the signal 90 s before it: slurmctld
		// looks every 30 s or so, so the signal comes 30 to 60 s in, once
		// the workers train even on a loaded machine, and the job stops
		// well before the limit and its SIGKILL.
		{name: "time-limit", env: []string{"SHOAL_MODE=async", "SHOAL_STEPS=100000000", psPorts(ports + 9), "SHOAL_CHECKPOINT_DIR=" + ckLimit},
			args: []string{"--time=2", "--signal=B:TERM@90"}, ckpt: ckLimit},
	}
	ids := map[*job]string{}
	for _, j := range jobs {
		args := []string{"--parsable", "--job-name=shoal-" + j.name, "--nodes=2", "--ntasks=2", "--cpus-per-task=1", "--time=3",
			"--chdir=" + c.dir, "--output=" + filepath.Join(c.dir, j.name+"-%j.out"),
			"--export=ALL," + strings.Join(append([]string{"SHOAL_BIN=" + bin, "SHOAL_DATASET=synthetic", "SHOAL_HIDDEN=16"}, j.env...), ",")}
		args = append(args, j.args...)
		args = append(args, filepath.Join(mustAbs(t, "slurm"), "shoal.sbatch"))
		out, err := c.command("sbatch", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("sbatch %s: %v\n%s", j.name, err, out)
		}
		ids[j] = strings.TrimSpace(strings.Split(string(out), ";")[0])
	}
	output := func(j *job) string {
		b, _ := os.ReadFile(filepath.Join(c.dir, j.name+"-"+ids[j]+".out"))
		return string(b)
	}
	// Stop the cancel job once it trains (rank 0's first progress line).
	for _, j := range jobs {
		if j.stop == nil {
			continue
		}
		if !poll(2*time.Minute, func() bool { return strings.Contains(output(j), "epoch 1/") }) {
			t.Fatalf("%s: no worker trained an epoch within 2 minutes:\n%s", j.name, output(j))
		}
		j.stop(t, ids[j])
	}
	for _, j := range jobs {
		var state string
		if !poll(2*time.Minute+30*time.Second, func() bool { state = c.jobState(ids[j]); return finished(state) }) {
			c.command("scancel", ids[j]).Run()
			t.Fatalf("%s: job %s still %s:\n%s", j.name, ids[j], state, output(j))
		}
		out := output(j)
		t.Run(j.name, func(t *testing.T) {
			if !strings.HasPrefix(state, "COMPLETED 0:0") {
				t.Errorf("job %s ended %s, want COMPLETED 0:0:\n%s", ids[j], state, out)
			}
			if !testLine.MatchString(out) {
				t.Errorf("no test line of rank 0:\n%s", out)
			}
			if j.ckpt != "" {
				checkShutdownCheckpoints(t, j.ckpt, out)
				if !strings.Contains(out, "stopped early by a signal") || !strings.Contains(out, "shoal.sbatch: done (stopped early)") {
					t.Errorf("the run was not stopped early by a signal:\n%s", out)
				}
			}
		})
	}
}

var (
	testLine   = regexp.MustCompile(`(?m)^test: loss [0-9.]+, accuracy [0-9.]+%`)
	stoppedPS  = regexp.MustCompile(`msg=stopped component=ps clock=([0-9]+)`)
	checkpoint = regexp.MustCompile(`^shard-[0-9]+-of-[0-9]+-clock-([0-9]+)\.safetensors$`)
)

// checkShutdownCheckpoints checks that both shards logged "stopped" and
// that each shard's newest checkpoint under dir/shard-K is at a clock a
// shard stopped at: the shutdown checkpoint, not only the periodic ones.
func checkShutdownCheckpoints(t *testing.T, dir, out string) {
	t.Helper()
	stops := stoppedPS.FindAllStringSubmatch(out, -1)
	if len(stops) != 2 {
		t.Errorf("%d shards logged stopped, want 2:\n%s", len(stops), out)
		return
	}
	clocks := map[int64]bool{}
	for _, m := range stops {
		n, _ := strconv.ParseInt(m[1], 10, 64)
		clocks[n] = true
	}
	for k := range 2 {
		entries, err := os.ReadDir(filepath.Join(dir, fmt.Sprintf("shard-%d", k)))
		if err != nil {
			t.Errorf("shard %d's checkpoints: %v", k, err)
			continue
		}
		newest := int64(-1)
		for _, e := range entries {
			if m := checkpoint.FindStringSubmatch(e.Name()); m != nil {
				n, _ := strconv.ParseInt(m[1], 10, 64)
				newest = max(newest, n)
			}
		}
		if !clocks[newest] {
			t.Errorf("shard %d's newest checkpoint is at clock %d; the shards stopped at %v: no shutdown checkpoint", k, newest, clocks)
		}
	}
}

// psPorts is the recipe's shard and gossip ports, from base: 2 of each.
func psPorts(base int) string {
	return fmt.Sprintf("SHOAL_PS_PORT=%d,SHOAL_GOSSIP_PORT=%d", base, base+2)
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// poll calls done until it says true or d has passed; a bounded poll of
// Slurm's state and the jobs' files, which change outside this process.
func poll(d time.Duration, done func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if done() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// finished says whether a job state from jobState is a final one.
func finished(state string) bool {
	s, _, _ := strings.Cut(state, " ")
	switch s {
	case "", "PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "REQUEUED", "RESIZING", "SIGNALING", "STAGE_OUT":
		return false
	}
	return true
}

// minicluster is a running slurm/testdata/minicluster.sh cluster.
type minicluster struct {
	dir  string
	conf string
}

// startMinicluster starts the cluster under a temporary folder and stops it
// when the test ends; unable is called where it cannot start.
func startMinicluster(t *testing.T, unable func(string, ...any)) *minicluster {
	t.Helper()
	// Not t.TempDir: slurmd's spool holds root-only files, and a stuck
	// daemon's files should not fail the test's cleanup.
	dir, err := os.MkdirTemp("", "shoal-slurm-")
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(mustAbs(t, "slurm"), "testdata", "minicluster.sh")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// Output to a file: the daemons it starts may hold a pipe open.
	logPath := filepath.Join(dir, "minicluster.out")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, "bash", script, "up", dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	err = cmd.Run()
	logf.Close()
	down := func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer dcancel()
		if out, err := exec.CommandContext(dctx, "bash", script, "down", dir).CombinedOutput(); err != nil {
			t.Logf("minicluster.sh down: %v\n%s", err, out)
		}
		os.RemoveAll(dir)
	}
	if err != nil {
		out, _ := os.ReadFile(logPath)
		down()
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == 3 {
			unable("no real Slurm here: %s", strings.TrimSpace(string(out)))
		}
		unable("the one-host Slurm cluster did not start: %v\n%s", err, out)
	}
	t.Cleanup(down)
	return &minicluster{dir: dir, conf: filepath.Join(dir, "slurm.conf")}
}

// command is a Slurm client command against the cluster.
func (c *minicluster) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "SLURM_CONF="+c.conf)
	return cmd
}

// jobState is "STATE EXITCODE" of job id (scontrol keeps a finished job
// for MinJobAge, 300 s in minicluster.sh), or "" while it is not known.
func (c *minicluster) jobState(id string) string {
	out, err := c.command("scontrol", "show", "job", id).Output()
	if err != nil {
		return ""
	}
	var state, code string
	for f := range strings.FieldsSeq(string(out)) {
		if v, ok := strings.CutPrefix(f, "JobState="); ok {
			state = v
		}
		if v, ok := strings.CutPrefix(f, "ExitCode="); ok {
			code = v
		}
	}
	return strings.TrimSpace(state + " " + code)
}
