package sim

import (
	"fmt"

	"github.com/shoalml/shoal/consistency"
)

// Hosts is per-host aggregation in the parameter-server modes (shoal
// train --host-aggregate, worker.HostGroup): the workers PerHost to a
// host average their gradients among themselves, the host's first
// alone pushes the mean and pulls the weights, which it broadcasts to
// the others. The shards see one worker per host.
type Hosts struct {
	// PerHost is the workers of a host, at least 1 (1: no aggregation).
	PerHost int
	// BytesPerSec is the bandwidth of one hop between a host's workers
	// (shared memory; 0: infinite), Latency its one-way latency.
	BytesPerSec, Latency float64
}

// StepSeconds is what aggregation adds to every step of a host's
// workers for a vector of m bytes: the ring allreduce of the mean, 2(k−1)
// hops of m/k each, then the chained broadcast of the weights, k−1
// latencies and m through (its segments pipelined), with k = PerHost.
// Both are on every step's path (the reduce before the push, the
// broadcast after the pull), nothing overlapping them.
func (h Hosts) StepSeconds(m int64) float64 {
	k := float64(h.PerHost)
	if h.PerHost <= 1 {
		return 0
	}
	var perByte float64
	if h.BytesPerSec > 0 {
		perByte = 1 / h.BytesPerSec
	}
	reduce := 2 * (k - 1) * (h.Latency + float64(m)/k*perByte)
	broadcast := (k-1)*h.Latency + float64(m)*perByte
	return reduce + broadcast
}

// RunHosts simulates cfg with its Workers grouped h.PerHost to a host:
// the shards' job has Workers/PerHost workers, each a host whose step
// takes h.StepSeconds on top of its compute; the result counts every
// worker's samples (SamplesPerSec, Efficiency against cfg.Workers that
// only compute), its traffic per worker and step (the hosts' others
// send nothing over the network: BytesSent and BytesReceived are the
// hosts' divided by PerHost), and the aggregation's time as
// communication, not compute. The steps of one host's workers are
// lock-stepped by their collectives, so the host's step is theirs.
func RunHosts(cfg Config, h Hosts) (Result, error) {
	switch {
	case h.PerHost < 1:
		return Result{}, fmt.Errorf("sim: %d workers per host, want >= 1", h.PerHost)
	case !cfg.Mode.UsesServers():
		return Result{}, fmt.Errorf("sim: per-host aggregation in %s mode: only the parameter-server modes aggregate per host", cfg.Mode)
	case cfg.Workers%h.PerHost != 0:
		return Result{}, fmt.Errorf("sim: %d workers in hosts of %d, want a whole number of hosts", cfg.Workers, h.PerHost)
	case h.BytesPerSec < 0 || h.Latency < 0:
		return Result{}, fmt.Errorf("sim: host bandwidth %g B/s, latency %gs: want >= 0", h.BytesPerSec, h.Latency)
	case cfg.Mode == consistency.Sync && cfg.BackupWorkers >= cfg.Workers/h.PerHost:
		return Result{}, fmt.Errorf("sim: %d backup workers of %d hosts, want 0..hosts-1 (with aggregation the shards count hosts)", cfg.BackupWorkers, cfg.Workers/h.PerHost)
	}
	k := float64(h.PerHost)
	extra := h.StepSeconds(cfg.VectorBytes())
	hosts := cfg
	hosts.Workers = cfg.Workers / h.PerHost
	hosts.Backward += extra
	if len(cfg.Start) > hosts.Workers {
		hosts.Start = cfg.Start[:hosts.Workers]
	}
	r, err := Run(hosts)
	if err != nil {
		return Result{}, err
	}
	r.SamplesPerSec *= k
	r.Efficiency = r.SamplesPerSec / (float64(cfg.Workers) * float64(cfg.Batch) / (cfg.Forward + cfg.Backward))
	r.ComputeSeconds = max(r.ComputeSeconds-extra, 0)
	r.CommSeconds = max(r.StepSeconds-r.ComputeSeconds, 0)
	r.BytesSent /= k
	r.BytesReceived /= k
	return r, nil
}
