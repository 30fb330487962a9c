package cluster

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		want    Identity
		wantErr string
	}{
		{"nothing set", nil, Identity{0, 1, 0, "default"}, ""},
		{"shoal", map[string]string{"SHOAL_RANK": "2", "SHOAL_WORLD_SIZE": "4", "SHOAL_LOCAL_RANK": "0"}, Identity{2, 4, 0, "SHOAL_*"}, ""},
		{"open mpi", map[string]string{"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_LOCAL_RANK": "1"}, Identity{3, 8, 1, "Open MPI"}, ""},
		{"slurm", map[string]string{"SLURM_PROCID": "5", "SLURM_NTASKS": "6", "SLURM_LOCALID": "2"}, Identity{5, 6, 2, "Slurm"}, ""},
		{"torchrun", map[string]string{"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}, Identity{1, 2, 1, "torchrun"}, ""},
		{"shoal wins over mpi", map[string]string{"SHOAL_RANK": "0", "SHOAL_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}, Identity{0, 2, 0, "SHOAL_*"}, ""},
		{"missing size", map[string]string{"SLURM_PROCID": "1"}, Identity{}, "SLURM_NTASKS is not set"},
		{"not a number", map[string]string{"RANK": "x", "WORLD_SIZE": "2"}, Identity{}, `RANK="x"`},
		{"rank out of range", map[string]string{"RANK": "2", "WORLD_SIZE": "2"}, Identity{}, "rank 2: want 0..1"},
		{"negative rank", map[string]string{"RANK": "-1", "WORLD_SIZE": "2"}, Identity{}, "rank -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FromEnv(func(k string) string { return tc.env[k] })
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}
