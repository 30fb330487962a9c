//go:build cgo

package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hvdAllreduce is a Horovod program: each rank allreduces (rank+1)s.
const hvdAllreduce = `import torch
import shoal.torch as hvd
hvd.init()
t = torch.ones(4) * (hvd.rank() + 1)
print(hvd.rank(), hvd.size(), hvd.allreduce(t, op=hvd.Sum).tolist())
hvd.shutdown()
`

// TestRunHorovodProgram runs a shoal.torch program under shoal run, as
// horovodrun would: the ranks find one another from the environment
// shoal run gives them alone, and allreduce 1s and 2s into 3s.
func TestRunHorovodProgram(t *testing.T) {
	needTorch(t)
	lib := libshoal(t)
	ctx := ctxT(t, 15*time.Minute)

	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, shoalBin, "run", "-np", "2", systemPython, "-c", hvdAllreduce)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+repoPath("clients/python"), "SHOAL_LIBRARY="+lib, "OMP_NUM_THREADS=1", "SHOAL_COLLECTIVE_TIMEOUT=90")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "stdout:\n%s\nstderr:\n%s", &stdout, &stderr)
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	slices.Sort(lines)
	assert.Equal(t, []string{"[0]<stdout>:0 2 [3.0, 3.0, 3.0, 3.0]", "[1]<stdout>:1 2 [3.0, 3.0, 3.0, 3.0]"}, lines, "stderr:\n%s", &stderr)
}

var (
	libOnce sync.Once
	libPath string
	libErr  error
)

// libshoal builds shoal.torch's library (cmd/libshoal, c-shared) once per
// test binary and returns its path.
func libshoal(t *testing.T) string {
	t.Helper()
	libOnce.Do(func() {
		dir, err := os.MkdirTemp("", "libshoal-")
		if err != nil {
			libErr = err
			return
		}
		libPath = filepath.Join(dir, "libshoal.so")
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		if out, err := exec.CommandContext(ctx, "go", "build", "-buildmode=c-shared", "-o", libPath, "../libshoal").CombinedOutput(); err != nil {
			libErr = fmt.Errorf("go build -buildmode=c-shared: %v\n%s", err, out)
		}
	})
	require.NoError(t, libErr)
	return libPath
}
