package tensorcoll

import (
	"fmt"
	"hash/fnv"
	"net"
	"strconv"

	"github.com/shoalml/shoal/cluster"
	"github.com/shoalml/shoal/secure"
)

// DefaultMasterPort is the rendezvous port when only MASTER_ADDR is set
// (torchrun's default).
const DefaultMasterPort = "29500"

// localSizeVars are the variables launchers set to the number of ranks on
// this host, in cluster.FromEnv's launcher order.
var localSizeVars = [...]string{"SHOAL_LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE", "LOCAL_WORLD_SIZE"}

// jobVars name the current launch, for a job id and a default master port
// when the launcher (mpirun) sets no master address.
var jobVars = [...]string{"SHOAL_JOB_ID", "TORCHELASTIC_RUN_ID", "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "SLURM_JOB_ID"}

// ConfigFromEnv fills cfg's Rank, Size and LocalRank the way Shoal's
// workers read them (cluster.FromEnv: SHOAL_*, Open MPI, Slurm, torchrun),
// LocalSize from the launcher's local-size variable (else Size when every
// rank is local, else 1), Master from SHOAL_MASTER or MASTER_ADDR and
// MASTER_PORT, and JobID from SHOAL_JOB_ID or the launcher's job. When
// the launcher names no master and all ranks run on this host (mpirun -np
// N on one machine), the master is 127.0.0.1 on a port derived from the
// launcher's job id. SHOAL_TLS_CERT, SHOAL_TLS_KEY, SHOAL_TLS_CA and
// SHOAL_AUTH_TOKEN_FILE, when set, are its Security. It returns where the
// identity came from.
func ConfigFromEnv(cfg Config, getenv func(string) string) (Config, string, error) {
	id, err := cluster.FromEnv(getenv)
	if err != nil {
		return cfg, "", err
	}
	cfg.Rank, cfg.Size, cfg.LocalRank = id.Rank, id.WorldSize, id.LocalRank
	cfg.LocalSize = 0
	for _, v := range localSizeVars {
		if s := getenv(v); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 {
				return cfg, "", fmt.Errorf("%s=%q: want a positive integer", v, s)
			}
			cfg.LocalSize = n
			break
		}
	}
	if cfg.LocalSize == 0 {
		cfg.LocalSize = 1
		if id.Source == "default" {
			cfg.LocalSize = cfg.Size
		}
	}
	if cfg.LocalRank >= cfg.LocalSize {
		cfg.LocalSize = cfg.LocalRank + 1
	}
	job := ""
	for _, v := range jobVars {
		if s := getenv(v); s != "" {
			job = s
			break
		}
	}
	if cfg.JobID == "" {
		cfg.JobID = job
	}
	if len(cfg.JobID) > 256 {
		cfg.JobID = cfg.JobID[:256]
	}
	switch addr, port := getenv("MASTER_ADDR"), getenv("MASTER_PORT"); {
	case getenv("SHOAL_MASTER") != "":
		cfg.Master = getenv("SHOAL_MASTER")
	case addr != "":
		if port == "" {
			port = DefaultMasterPort
		}
		cfg.Master = net.JoinHostPort(addr, port)
	case cfg.Size > 1 && cfg.LocalSize == cfg.Size && job != "":
		h := fnv.New32a()
		h.Write([]byte(job))
		cfg.Master = net.JoinHostPort("127.0.0.1", strconv.Itoa(20000+int(h.Sum32()%20000)))
	case cfg.Size > 1:
		return cfg, "", fmt.Errorf("rank %d of %d (from %s): no rendezvous address: set MASTER_ADDR and MASTER_PORT (or SHOAL_MASTER=host:port) to rank 0's host and a free port, the same on every rank", cfg.Rank, cfg.Size, id.Source)
	}
	files := secure.Files{Cert: getenv("SHOAL_TLS_CERT"), Key: getenv("SHOAL_TLS_KEY"), CA: getenv("SHOAL_TLS_CA"), Token: getenv("SHOAL_AUTH_TOKEN_FILE")}
	if files != (secure.Files{}) {
		if cfg.Security, err = secure.Load(files); err != nil {
			return cfg, "", fmt.Errorf("SHOAL_TLS_*/SHOAL_AUTH_TOKEN_FILE: %w", err)
		}
	}
	return cfg, id.Source, nil
}
