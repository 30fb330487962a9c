package cluster_test

import (
	"context"
	"fmt"
	"time"

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

// Two processes on one machine gossip their roles and addresses; each
// reads membership views until it sees the other.
func ExampleMembership() {
	newNode := func(name string, meta cluster.Meta) *cluster.Membership {
		cfg := cluster.DefaultConfig() // loopback, ephemeral port
		cfg.Name = name
		cfg.Meta = meta
		m, err := cluster.New(cfg)
		if err != nil {
			panic(err)
		}
		return m
	}
	ps := newNode("ps-0", cluster.Meta{Role: cluster.RolePS, Rank: 0, GRPCAddr: "127.0.0.1:6000"})
	defer ps.Close()
	w := newNode("worker-0", cluster.Meta{Role: cluster.RoleWorker, Rank: 0, GRPCAddr: "127.0.0.1:7000"})
	defer w.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.Join(ctx, []string{ps.Addr()}); err != nil {
		panic(err)
	}
	for v := range w.Views() {
		if len(v.Members) < 2 {
			continue
		}
		for _, m := range v.Members {
			fmt.Println(m.Name, m.Meta.Role, m.Meta.Rank, m.Meta.GRPCAddr)
		}
		break
	}
	// Output:
	// ps-0 ps 0 127.0.0.1:6000
	// worker-0 worker 0 127.0.0.1:7000
}
