package cluster_test

import (
	"fmt"

	"github.com/shoalml/shoal/cluster"
)

// A process started by Slurm's srun: its rank comes from SLURM_PROCID.
// In main the environment is os.Getenv's.
func ExampleFromEnv() {
	env := map[string]string{"SLURM_PROCID": "3", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1"}
	id, err := cluster.FromEnv(func(k string) string { return env[k] })
	if err != nil {
		panic(err)
	}
	fmt.Println(id.Rank, id.WorldSize, id.LocalRank, id.Source)
	// Output: 3 8 1 Slurm
}
