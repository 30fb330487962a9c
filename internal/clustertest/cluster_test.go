package clustertest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const image = "shoal:clustertest"

var (
	buildOnce sync.Once
	buildErr  error
	root      string // the repository
)

// needCluster skips the test, saying why, where Docker or docker-compose
// is missing (fails instead with SHOAL_REQUIRE_DOCKER=1, as in CI), and
// builds the image once.
func needCluster(t *testing.T) {
	t.Helper()
	skip := t.Skipf
	if os.Getenv("SHOAL_REQUIRE_DOCKER") == "1" {
		skip = t.Fatalf
	}
	if testing.Short() {
		t.Skip("the docker-compose cluster tests are long; -short skips them")
	}
	for _, tool := range []string{"docker", "docker-compose"} {
		if _, err := exec.LookPath(tool); err != nil {
			skip("%s is not installed: the cluster tests need a Docker engine and docker-compose", tool)
		}
	}
	if out, err := exec.Command("docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		skip("no Docker engine answers (docker info: %v: %s)", err, strings.TrimSpace(string(out)))
	}
	// The image holds the dataset (scripts/image.sh copies it in).
	if _, err := os.Stat("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"); err != nil {
		skip("Fashion-MNIST is not installed, and the image holds it (apt-get install dataset-fashion-mnist): %v", err)
	}
	buildOnce.Do(func() {
		wd, err := os.Getwd()
		if err != nil {
			buildErr = err
			return
		}
		root = filepath.Join(wd, "..", "..")
		cmd := exec.Command("scripts/image.sh", image)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("scripts/image.sh: %v\n%s", err, out)
		}
	})
	require.NoError(t, buildErr)
}

// cluster is one docker-compose project of the test.
type cluster struct {
	t       *testing.T
	project string
	file    string
	env     []string
}

func newCluster(t *testing.T, file, mode string) *cluster {
	name := strings.ToLower(regexp.MustCompile(`[^a-zA-Z0-9]+`).ReplaceAllString(t.Name(), ""))
	c := &cluster{t: t, project: fmt.Sprintf("shoalt%d%s", os.Getpid(), name), file: filepath.Join(root, file),
		env: []string{"SHOAL_IMAGE=" + image, "SHOAL_MODE=" + mode, "SHOAL_EPOCHS=2", "SHOAL_HIDDEN=128"}}
	// Everything the project made goes, even when the test fails.
	t.Cleanup(func() {
		if out, err := c.command(context.Background(), "down", "-v", "--remove-orphans", "-t", "1").CombinedOutput(); err != nil {
			t.Logf("docker-compose down: %v\n%s", err, out)
		}
	})
	return c
}

func (c *cluster) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "docker-compose", append([]string{"-p", c.project, "-f", c.file}, args...)...)
	cmd.Env = append(os.Environ(), c.env...)
	return cmd
}

// container is the name docker-compose 1 gives service's first container.
func (c *cluster) container(service string) string { return c.project + "_" + service + "_1" }

func (c *cluster) docker(ctx context.Context, args ...string) {
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	require.NoError(c.t, err, "docker %v: %s", args, out)
}

// up runs the cluster to its end. Each line of its log goes to on, which
// may act on the cluster (kill a container); up returns the whole log.
func (c *cluster) up(ctx context.Context, on func(line string)) string {
	cmd := c.command(ctx, "up", "--no-color")
	out, err := cmd.StdoutPipe()
	require.NoError(c.t, err)
	cmd.Stderr = cmd.Stdout
	require.NoError(c.t, cmd.Start())
	var log strings.Builder
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		log.WriteString(sc.Text() + "\n")
		on(sc.Text())
	}
	require.NoError(c.t, cmd.Wait(), "docker-compose up:\n%s", log.String())
	return log.String()
}

// exited is the exit code docker-compose reported for service.
func exited(t *testing.T, log, container string) string {
	m := regexp.MustCompile(regexp.QuoteMeta(container) + ` exited with code (\d+)`).FindStringSubmatch(log)
	require.NotNil(t, m, "%s did not exit:\n%s", container, log)
	return m[1]
}

var accuracy = regexp.MustCompile(`worker0_1 +\| test: loss [0-9.]+, accuracy ([0-9.]+)%`)

// TestAKilledWorkerLeavesTheOthersTraining: docker kill worker 2 once it
// has done its first epoch of two; the others finish the run and worker 0
// reports the test accuracy.
func TestAKilledWorkerLeavesTheOthersTraining(t *testing.T) {
	needCluster(t)
	for _, mode := range []string{"sync", "ssp", "async", "ring"} {
		t.Run(mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			file := "docker-compose.yml"
			if mode == "ring" {
				file = "docker-compose.ring.yml"
			}
			c := newCluster(t, file, mode)
			killed := false
			start := time.Now()
			log := c.up(ctx, func(line string) {
				// Its own first epoch line: async workers run at their
				// own pace, and one may finish before another's first.
				if !killed && strings.Contains(line, "worker2_1") && strings.Contains(line, `msg="epoch done"`) {
					killed = true
					c.docker(ctx, "kill", c.container("worker2"))
				}
			})
			require.True(t, killed, "no epoch line to kill after:\n%s", log)
			assert.Equal(t, "137", exited(t, log, c.container("worker2")), "worker 2 was SIGKILLed")
			for _, w := range []string{"worker0", "worker1", "worker3"} {
				assert.Equal(t, "0", exited(t, log, c.container(w)), "%s finishes the run", w)
			}
			m := accuracy.FindStringSubmatch(log)
			require.NotNil(t, m, "worker 0 reported no test accuracy:\n%s", log)
			t.Logf("%s: worker 2 killed after epoch 1; the others finished in %v at test accuracy %s%%", mode, time.Since(start).Round(time.Second), m[1])
		})
	}
}

// TestAServerKilledAndRestartedLosesNothing: docker kill shard 1 mid-run
// and start it again; it resumes from its checkpoint and journal, the run
// finishes, and in sync mode its final clock is exactly the run's step
// count: no step lost, none applied twice.
func TestAServerKilledAndRestartedLosesNothing(t *testing.T) {
	needCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := newCluster(t, "docker-compose.yml", "sync")
	restarted := false
	log := c.up(ctx, func(line string) {
		if !restarted && strings.Contains(line, "worker0_1") && strings.Contains(line, "epoch 1/") {
			restarted = true
			c.docker(ctx, "kill", c.container("ps1"))
			c.docker(ctx, "start", c.container("ps1"))
		}
	})
	require.True(t, restarted, "no epoch line to restart after:\n%s", log)
	// 2 epochs of 60,000 samples, 4 workers of batch 64: 235 steps each.
	stops := regexp.MustCompile(`ps1_1 .*msg=stopped .*clock=(\d+)`).FindAllStringSubmatch(log, -1)
	require.NotEmpty(t, stops, "shard 1 never stopped cleanly:\n%s", log)
	assert.Equal(t, "470", stops[len(stops)-1][1], "shard 1's final clock")
	assert.Contains(t, log, "ps1_1", "restarted shard logs")
	for _, w := range []string{"worker0", "worker1", "worker2", "worker3"} {
		assert.Equal(t, "0", exited(t, log, c.container(w)), "%s finishes the run", w)
	}
	require.NotNil(t, accuracy.FindStringSubmatch(log), "worker 0 reported no test accuracy:\n%s", log)
}
