package cluster

import (
	"fmt"
	"strconv"
)

// Identity is a process's place in a job.
type Identity struct {
	Rank, WorldSize, LocalRank int
	// Source names where the values came from, e.g. "Open MPI".
	Source string
}

// launcher lists the variables one launcher sets.
type launcher struct {
	name              string
	rank, size, local string
}

// launchers in the order they are consulted (DESIGN.md, "Ranks from the
// launchers people already use").
var launchers = [...]launcher{
	{"SHOAL_*", "SHOAL_RANK", "SHOAL_WORLD_SIZE", "SHOAL_LOCAL_RANK"},
	{"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
	{"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
	{"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
}

// FromEnv returns the identity set by the first launcher whose rank
// variable is present, or rank 0 of 1 (Source "default") when none is.
// A launcher whose variables are malformed or inconsistent is an error
// naming the variable, never silently skipped.
func FromEnv(getenv func(string) string) (Identity, error) {
	for _, l := range launchers {
		if getenv(l.rank) == "" {
			continue
		}
		id := Identity{Source: l.name}
		var err error
		if id.Rank, err = intVar(getenv, l.rank, true); err != nil {
			return Identity{}, err
		}
		if id.WorldSize, err = intVar(getenv, l.size, true); err != nil {
			return Identity{}, err
		}
		if id.LocalRank, err = intVar(getenv, l.local, false); err != nil {
			return Identity{}, err
		}
		if err := id.Validate(); err != nil {
			return Identity{}, fmt.Errorf("%s environment: %w", l.name, err)
		}
		return id, nil
	}
	return Identity{Rank: 0, WorldSize: 1, Source: "default"}, nil
}

func intVar(getenv func(string) string, name string, required bool) (int, error) {
	v := getenv(name)
	if v == "" {
		if required {
			return 0, fmt.Errorf("%s is not set, but the launcher's other variables are", name)
		}
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: want a non-negative integer", name, v)
	}
	return n, nil
}

// Validate checks 0 <= Rank < WorldSize and LocalRank >= 0.
func (id Identity) Validate() error {
	if id.WorldSize < 1 {
		return fmt.Errorf("world size %d: want >= 1", id.WorldSize)
	}
	if id.Rank < 0 || id.Rank >= id.WorldSize {
		return fmt.Errorf("rank %d: want 0..%d for a world of %d", id.Rank, id.WorldSize-1, id.WorldSize)
	}
	if id.LocalRank < 0 {
		return fmt.Errorf("local rank %d: want >= 0", id.LocalRank)
	}
	return nil
}
