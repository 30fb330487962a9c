// Package cluster finds a process's place in a job: its rank, the world
// size and its local rank, from flags or from the environment variables of
// the launchers people already use (Shoal's own SHOAL_*, Open MPI's mpirun,
// Slurm's srun, torchrun). Membership through hashicorp/memberlist will
// live here too.
//
// Everything here is pure: it reads the environment through a function the
// caller passes (os.Getenv in main), so tests need no process environment.
//
// ExampleFromEnv (example_test.go) reads the identity srun gives a process.
package cluster
