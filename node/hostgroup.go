package node

import (
	"context"
	"fmt"

	"github.com/shoalml/shoal/collective"
	"github.com/shoalml/shoal/collective/collnet"
	"github.com/shoalml/shoal/launch"
	"github.com/shoalml/shoal/worker"
)

// hostGroup is a PS worker's place in its host's group (PSConfig.Host).
type hostGroup struct {
	host    int64 // the id the leader pushes as
	members []int // the group's ranks, leader first
	comm    *collective.Communicator
	close   func()
}

// leader says whether this worker talks to the servers for its host.
func (g *hostGroup) leader() bool { return g == nil || g.comm.Rank() == 0 }

// hosts is the number of hosts of a world of world workers.
func (h HostConfig) hosts(world int) int {
	if h.PerHost < 1 {
		return world
	}
	return world / h.PerHost
}

// joinHost forms this worker's host group (nil without PSConfig.Host): the
// first rank of the group serves its rendezvous, the others join it. The
// group's links do not pass the modelled NIC: they stay on the host.
func (w *psWorker) joinHost(ctx context.Context) (*hostGroup, error) {
	h := w.PS.Host
	if h.PerHost < 1 {
		return nil, nil
	}
	rank, world := w.ID.Rank, w.ID.WorldSize
	if world%h.PerHost != 0 {
		return nil, fmt.Errorf("--workers-per-host %d: the world of %d workers is no whole number of hosts (want a divisor of %d)", h.PerHost, world, world)
	}
	host := rank / h.PerHost
	g := &hostGroup{host: int64(host)}
	for i := range h.PerHost {
		g.members = append(g.members, host*h.PerHost+i)
	}
	local := rank % h.PerHost
	cctx, cancel := context.WithTimeout(ctx, w.PS.Connect)
	defer cancel()
	ccfg := collnet.Config{Rank: local, Size: h.PerHost, Master: h.Master, JobID: fmt.Sprintf("shoal-host-%d", host), SharedMemory: h.SharedMemory, Security: w.Creds}
	if local == 0 {
		lis, err := collnet.ListenMaster(h.Master)
		if err != nil {
			return nil, fmt.Errorf("--host-master %s: %w", h.Master, err)
		}
		ccfg.MasterListener = lis
		if w.Events {
			launch.Emit(w.out, launch.Event{Event: launch.Listening, Rank: rank, Addr: lis.Addr().String()})
		}
	}
	tr, err := collnet.Connect(cctx, ccfg)
	if err != nil {
		return nil, fmt.Errorf("worker %d: forming host %d's group of workers %v through %s: %w", rank, host, g.members, h.Master, err)
	}
	g.comm, err = collective.New(tr, collective.Config{SegmentBytes: collective.DefaultConfig().SegmentBytes, CallTimeout: w.CallTimeout})
	if err != nil {
		tr.Close()
		return nil, err
	}
	g.close = func() { tr.Close() }
	return g, nil
}

// servers is what the worker's strategy pushes to: the servers, or with
// a host group the group, whose leader reaches them through ps.
func (g *hostGroup) servers(ps worker.ParameterServers, shards int) (worker.ParameterServers, error) {
	if g == nil {
		return ps, nil
	}
	if g.comm.Rank() != 0 {
		ps = nil
	}
	return worker.NewHostGroup(ps, g.comm, worker.HostGroupConfig{Host: g.host, Workers: g.members, Shards: shards})
}
