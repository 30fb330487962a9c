package main

import (
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRunCommand: shoal run starts -np copies of a program as ranks, each
// told its rank and the world's size, their output prefixed with the
// rank; a rank's failure is shoal run's, named, with the rank's status.
func TestRunCommand(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	out, err := exec.CommandContext(ctx, shoalBin, "run", "-np", "2", "sh", "-c", "echo $SHOAL_RANK/$SHOAL_WORLD_SIZE").Output()
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	slices.Sort(lines)
	assert.Equal(t, []string{"[0]<stdout>:0/2", "[1]<stdout>:1/2"}, lines)

	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, shoalBin, "run", "-np", "2", "--", "sh", "-c", `if [ "$SHOAL_RANK" = 1 ]; then echo bye >&2; exit 3; fi; sleep 60`)
	cmd.Stderr = &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "stderr:\n%s", &stderr)
	assert.Equal(t, 3, ee.ExitCode(), "rank 1's status")
	assert.Contains(t, stderr.String(), "[1]<stderr>:bye\n")
	assert.Contains(t, stderr.String(), "shoal run: rank 1 exited with status 3\n")
	assert.NotContains(t, stderr.String(), "shoal: ", "said once, by shoal run")
}
