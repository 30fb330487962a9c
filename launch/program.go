package launch

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/secure"
)

// The environment every rank of RunProgram gets, beside this process's:
// the contract between shoal run and the programs it starts (the Python
// client reads it; tensorcoll.ConfigFromEnv and cluster.FromEnv read the
// identity and the rendezvous).
const (
	EnvRank      = "SHOAL_RANK"       // this rank, 0..SHOAL_WORLD_SIZE-1
	EnvWorldSize = "SHOAL_WORLD_SIZE" // how many ranks
	EnvLocalRank = "SHOAL_LOCAL_RANK" // the rank among this host's: the rank (one host)
	EnvLocalSize = "SHOAL_LOCAL_SIZE" // how many ranks on this host: all of them
	EnvMaster    = "SHOAL_MASTER"     // 127.0.0.1:PORT, a free loopback port where rank 0 serves the ring's rendezvous
	EnvJobID     = "SHOAL_JOB_ID"     // random hex, the run's own
	EnvMode      = "SHOAL_MODE"       // ring, async, sync or ssp
	// The parameter-server modes only.
	EnvServers = "SHOAL_SERVERS" // the shards' addresses, host:port, comma-separated in shard order
	EnvPSInit  = "SHOAL_PS_INIT" // the file rank 0 writes the model's initial weights to, which the shards wait for
	// EnvLocalSteps is H of low-communication training (DiLoCo): a rank
	// pushes the pseudo-gradient of its own H steps every H steps. Set
	// only when H > 0.
	EnvLocalSteps = "SHOAL_LOCAL_STEPS"
	// EnvCompression is how the ranks' pushes travel (none, fp16, bf16,
	// or int8 with local steps): shoal run --compression. Set only when
	// not none.
	EnvCompression = "SHOAL_COMPRESSION"
	// Those whose flags were given.
	EnvAuthTokenFile = "SHOAL_AUTH_TOKEN_FILE"
	EnvTLSCA         = "SHOAL_TLS_CA"
	EnvTLSCert       = "SHOAL_TLS_CERT"
	EnvTLSKey        = "SHOAL_TLS_KEY"
)

// ProgramConfig is one RunProgram: NP copies of a program as ranks
// 0..NP-1 on this host, as horovodrun -np NP runs them, after the
// parameter-server shards that its mode needs.
type ProgramConfig struct {
	// Program is what every rank runs: a program (found as exec.Command
	// finds it) and its arguments.
	Program []string
	// NP is how many ranks run; at least 1.
	NP int
	// Mode is how the ranks train: ring (they allreduce among
	// themselves) or a parameter-server mode, whose Servers shards start
	// first.
	Mode    consistency.Mode
	Servers int
	// LocalSteps, when > 0, is the H the ranks take between exchanges
	// (EnvLocalSteps); the shards' ServerArgs must say the same.
	LocalSteps int
	// Compression, when not "" or "none", is how the ranks' pushes travel
	// (EnvCompression): fp16, bf16, or int8 (with LocalSteps).
	Compression string
	// Exe is the binary the shards run (usually this one, os.Executable).
	Exe string
	// ServerArgs is shard's argv after Exe: listening on listen, and
	// taking the model's layout and initial weights from initFrom, the
	// file rank 0 writes (EnvPSInit).
	ServerArgs func(shard int, listen, initFrom string) []string
	// Sec names the TLS and token files to the ranks (EnvTLSCA, ...);
	// the shards get them from ServerArgs.
	Sec secure.Files
	// Stdout gets each rank's stdout, Stderr its stderr and the shards',
	// each line prefixed with who wrote it ("[1]<stderr>:", "[ps 0] ").
	Stdout, Stderr io.Writer
	// StartupTimeout bounds how long a shard may take to listen.
	StartupTimeout time.Duration
	// StopGrace is how long a child asked to stop (a rank failed, or
	// ctx ended) has to exit after its SIGTERM before SIGKILL ends it.
	StopGrace time.Duration
}

// DefaultProgramConfig is program as np ranks of a ring, their output on
// stdout and stderr, a shard's start-up bounded by a minute and the
// others stopped with horovodrun's grace of 5s.
func DefaultProgramConfig(program []string, np int, stdout, stderr io.Writer) ProgramConfig {
	return ProgramConfig{Program: program, NP: np, Mode: consistency.Ring, Stdout: stdout, Stderr: stderr,
		StartupTimeout: time.Minute, StopGrace: 5 * time.Second}
}

// validate checks cfg before anything starts.
func (cfg *ProgramConfig) validate() error {
	ps := cfg.Mode != consistency.Ring
	switch {
	case len(cfg.Program) == 0 || cfg.Program[0] == "":
		return errors.New("no program to run: give it after the flags, e.g. shoal run -np 2 python3 train.py")
	case cfg.NP < 1:
		return fmt.Errorf("-np %d: want >= 1", cfg.NP)
	case !ps && cfg.Servers != 0:
		return fmt.Errorf("%d servers: --mode ring has none", cfg.Servers)
	case cfg.LocalSteps < 0 || (!ps && cfg.LocalSteps != 0):
		return fmt.Errorf("%d local steps: want 0, or > 0 in a parameter-server mode", cfg.LocalSteps)
	case !ps && cfg.Compression != "" && cfg.Compression != "none":
		return fmt.Errorf("compression %s: for the pushes of a parameter-server mode; in a ring the program's DistributedOptimizer says it", cfg.Compression)
	case ps && cfg.Servers < 1:
		return fmt.Errorf("--servers %d: --mode %s needs >= 1", cfg.Servers, cfg.Mode)
	case ps && (cfg.Exe == "" || cfg.ServerArgs == nil):
		return errors.New("launch: the servers need their binary and their argv")
	case cfg.Stdout == nil || cfg.Stderr == nil:
		return errors.New("launch: a run needs its stdout and stderr")
	}
	return nil
}

// RunProgram runs cfg to its end. In a parameter-server mode it first
// starts the shards, one after the other, each on a free loopback port,
// and waits for each to listen; then it starts the ranks, each with the
// environment of the contract above (EnvRank, ...). Every line they
// print is passed through, prefixed with the rank. It returns nil once
// every rank has exited with status 0. The first rank to fail ends the
// run: the others are stopped and the error is a *RankError (its
// ExitCode is what to exit with). When ctx ends (SIGINT, SIGTERM), every
// child gets SIGTERM, then SIGKILL after cfg.StopGrace, and the error
// wraps ctx's. A shard's death ends the run too. The shards, and the
// temporary folder of the initial weights' file, go with the run.
func RunProgram(ctx context.Context, cfg ProgramConfig) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	master, err := freeLoopback()
	if err != nil {
		return fmt.Errorf("a port for the rendezvous: %w", err)
	}
	id := make([]byte, 8)
	_, _ = rand.Read(id) // never fails (crypto/rand)
	env := &rankEnv{cfg: &cfg, master: master, jobID: hex.EncodeToString(id)}
	job := DefaultJobConfig(cfg.Exe, cfg.Stdout, cfg.Stderr)
	job.Name, job.WorkerExe, job.Workers, job.FailFast = "shoal run", cfg.Program[0], cfg.NP, true
	job.StartupTimeout, job.StopGrace = cfg.StartupTimeout, cfg.StopGrace
	job.WorkerArgs = func(int, []string, []string, string) []string { return cfg.Program[1:] }
	job.WorkerEnv = env.of
	if cfg.Mode != consistency.Ring {
		dir, err := os.MkdirTemp("", "shoal-run-") // 0700
		if err != nil {
			return fmt.Errorf("a folder for the initial weights: %w", err)
		}
		defer os.RemoveAll(dir)
		env.init = filepath.Join(dir, "initial-weights")
		job.Servers = cfg.Servers
		job.ServerArgs = func(shard int, listen string, _ []string, _ int) []string {
			return cfg.ServerArgs(shard, listen, env.init)
		}
	}
	_, err = RunJob(ctx, job)
	return err
}

// rankEnv builds the ranks' environment.
type rankEnv struct {
	cfg           *ProgramConfig
	master, jobID string
	init          string // EnvPSInit; "" in a ring
}

// of is rank's environment, given the shards' addresses.
func (e *rankEnv) of(rank int, servers []string) []string {
	np := strconv.Itoa(e.cfg.NP)
	env := []string{EnvRank + "=" + strconv.Itoa(rank), EnvWorldSize + "=" + np, EnvLocalRank + "=" + strconv.Itoa(rank), EnvLocalSize + "=" + np,
		EnvMaster + "=" + e.master, EnvJobID + "=" + e.jobID, EnvMode + "=" + e.cfg.Mode.String()}
	if e.init != "" {
		env = append(env, EnvServers+"="+strings.Join(servers, ","), EnvPSInit+"="+e.init)
	}
	if e.cfg.LocalSteps > 0 {
		env = append(env, EnvLocalSteps+"="+strconv.Itoa(e.cfg.LocalSteps))
	}
	if c := e.cfg.Compression; c != "" && c != "none" {
		env = append(env, EnvCompression+"="+c)
	}
	for _, f := range []struct{ name, path string }{
		{EnvAuthTokenFile, e.cfg.Sec.Token}, {EnvTLSCA, e.cfg.Sec.CA}, {EnvTLSCert, e.cfg.Sec.Cert}, {EnvTLSKey, e.cfg.Sec.Key},
	} {
		if f.path != "" {
			env = append(env, f.name+"="+f.path)
		}
	}
	return env
}

// freeLoopback is a loopback address whose port was free a moment ago:
// rank 0's rendezvous.
func freeLoopback() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	return addr, l.Close()
}
