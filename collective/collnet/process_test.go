package collnet

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The helper process: the test binary run again with helperEnv set is
// rank 1 of a group of two whose rank 0 is the test.
const helperEnv = "SHOAL_COLLNET_TEST_HELPER"

func helperMain() int {
	shm, _ := strconv.ParseBool(os.Getenv("COLLNET_SHM"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tr, err := Connect(ctx, Config{
		Rank: 1, Size: 2,
		Master:       os.Getenv("COLLNET_MASTER"),
		Listen:       "127.0.0.1:0",
		JobID:        os.Getenv("COLLNET_JOB"),
		SharedMemory: shm,
		RingBytes:    testRingBytes,
		ShmDir:       os.Getenv("COLLNET_DIR"),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	if err := tr.Send(ctx, 0, []byte("ready!")); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	// Wait to be killed.
	tr.Recv(ctx, 0, make([]byte, 1))
	return 2
}

// TestKilledProcess kills a rank in another process with SIGKILL: no
// Close, no goodbye. Its peer's calls fail with a PeerError naming it, and
// no ring file is left behind.
func TestKilledProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			cfg := groupConfigs(t, 2, m.shm)[0]
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(),
				helperEnv+"=1",
				"COLLNET_MASTER="+cfg.MasterListener.Addr().String(),
				"COLLNET_SHM="+strconv.FormatBool(m.shm),
				"COLLNET_JOB="+cfg.JobID,
				"COLLNET_DIR="+cfg.ShmDir,
			)
			cmd.Stderr = t.Output()
			require.NoError(t, cmd.Start())
			killed := false
			t.Cleanup(func() {
				if !killed {
					cmd.Process.Kill()
					cmd.Wait()
				}
			})

			ctx := ctxT(t, 20*time.Second)
			tr, err := Connect(ctx, cfg)
			require.NoError(t, err)
			defer tr.Close()
			assert.Equal(t, m.shm && shmSupported, tr.(*transport).links[1].send != nil, "shared memory")
			got := make([]byte, 6)
			require.NoError(t, tr.Recv(ctx, 1, got))
			assert.Equal(t, "ready!", string(got))

			blocked := make(chan error, 1)
			go func() { blocked <- tr.Recv(ctx, 1, got) }()
			require.NoError(t, cmd.Process.Kill())
			killed = true
			cmd.Wait()
			assertPeerError(t, <-blocked, 1, "recv in progress")
			assertPeerError(t, tr.Send(ctx, 1, make([]byte, 64<<20)), 1, "send after")
			assertEmptyDir(t, cfg.ShmDir)
		})
	}
}
