package tensorcoll_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/tensorcoll"
)

func TestConfigFromEnv(t *testing.T) {
	tests := []struct {
		name                        string
		env                         map[string]string
		rank, size, local, localSz  int
		master, source, errContains string
	}{
		{name: "nothing: one rank", env: map[string]string{}, size: 1, localSz: 1, source: "default"},
		{name: "torchrun", env: map[string]string{"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "1234"},
			rank: 1, size: 4, local: 1, localSz: 2, master: "10.0.0.1:1234", source: "torchrun"},
		{name: "master port defaults", env: map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h"},
			size: 2, localSz: 1, master: "h:29500", source: "torchrun"},
		{name: "mpirun on one host derives a loopback master", env: map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2",
			"OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "PMIX_NAMESPACE": "prterun-x-123@1"},
			rank: 1, size: 2, local: 1, localSz: 2, master: "127.0.0.1:", source: "Open MPI"},
		{name: "shoal master wins", env: map[string]string{"SHOAL_RANK": "0", "SHOAL_WORLD_SIZE": "2", "SHOAL_MASTER": "m:9", "MASTER_ADDR": "x"},
			size: 2, localSz: 1, master: "m:9", source: "SHOAL_*"},
		{name: "two hosts and no master", env: map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_NTASKS_PER_NODE": "2", "SLURM_JOB_ID": "7"},
			errContains: "MASTER_ADDR"},
		{name: "bad local size", env: map[string]string{"RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "x"}, errContains: "LOCAL_WORLD_SIZE"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, src, err := tensorcoll.ConfigFromEnv(tensorcoll.DefaultConfig(), func(k string) string { return tc.env[k] })
			if tc.errContains != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.errContains)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.source, src)
			assert.Equal(t, []int{tc.rank, tc.size, tc.local, tc.localSz}, []int{cfg.Rank, cfg.Size, cfg.LocalRank, cfg.LocalSize})
			assert.Contains(t, cfg.Master, tc.master)
		})
	}
}
