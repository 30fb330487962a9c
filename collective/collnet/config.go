package collnet

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/shoalml/shoal/secure"
)

// Defaults of Config.
const (
	// DefaultListen is the data-plane listen address: every interface, a
	// port the kernel picks.
	DefaultListen = ":0"
	// DefaultRingBytes is the data size of one shared-memory ring (one per
	// ordered pair of ranks on a host).
	DefaultRingBytes = 4 << 20
	// DefaultSocketBufferBytes is the SO_SNDBUF and SO_RCVBUF asked for on
	// data-plane connections (the kernel caps it at net.core.wmem_max and
	// net.core.rmem_max).
	DefaultSocketBufferBytes = 4 << 20
	// MaxJobIDLen bounds Config.JobID, which travels in every handshake.
	MaxJobIDLen = 1024
)

const minRingBytes = 4 << 10

// ErrConfig marks an invalid Config.
var ErrConfig = errors.New("invalid collnet config")

// Config describes one rank of a group. Every rank of the group is given
// the same Size, Master and JobID, and its own Rank.
type Config struct {
	// Rank is this process's rank, in [0, Size).
	Rank int
	// Size is the number of ranks (the world size), at least 1.
	Size int
	// Master is the host:port of rank 0's rendezvous server. Ranks other
	// than 0 dial it (retrying until their context ends, so they may start
	// before rank 0); rank 0 listens on it unless MasterListener is set.
	// Unused when Size is 1.
	Master string
	// MasterListener, on rank 0 only, is a listener to serve the
	// rendezvous on instead of listening on Master (see ListenMaster).
	// Connect takes it over and closes it before returning.
	MasterListener net.Listener
	// Listen is the data-plane listen address; default DefaultListen.
	Listen string
	// Advertise is the data-plane address the other ranks dial. By
	// default it is the listener's address, in which an unspecified host
	// (0.0.0.0, ::) is replaced by the address the rendezvous server sees
	// this rank at (for rank 0: the address each other rank reached the
	// rendezvous server at).
	Advertise string
	// JobID must be equal on every rank: it keeps groups that share a
	// master address or stray connections apart. At most MaxJobIDLen
	// bytes; may be empty.
	JobID string
	// HostID names the machine this rank runs on; ranks with equal host
	// ids may use shared memory. Default DefaultHostID().
	HostID string
	// SharedMemory makes ranks with equal host ids talk through rings in
	// shared memory instead of TCP (Linux only). A pair falls back to TCP
	// where either side has it off, cannot create or map a ring, or is on
	// another system.
	SharedMemory bool
	// RingBytes is the data size of each shared-memory ring: a power of
	// two from 4 KiB to 1 GiB; default DefaultRingBytes. Each rank maps two
	// rings per peer on its host.
	RingBytes int
	// ShmDir is where ring files are created (and unlinked as soon as
	// both sides mapped them); default /dev/shm, else os.TempDir().
	ShmDir string
	// SocketBufferBytes is the socket send and receive buffer size asked
	// for on data-plane connections; default DefaultSocketBufferBytes; a
	// negative value leaves the kernel's default (and its autotuning).
	SocketBufferBytes int
	// WrapData, when set, wraps each TCP data-plane connection once it is
	// dialed or accepted (TLS, when on, runs over the wrapper); Send and
	// Recv then go through the wrapper (which must honour read and write
	// deadlines). The benchmark harness puts its NIC
	// model here. Links over shared memory do not use it: turn
	// SharedMemory off to have every byte pass through it.
	WrapData func(net.Conn) net.Conn
	// Security, when it has TLS, makes the rendezvous a mutual-TLS gRPC
	// server (with its token, when it has one) and runs every TCP
	// data-plane link over mutual TLS from its first byte: the hello, and
	// the offer of a shared-memory ring, travel encrypted between peers
	// with certificates, so a stranger can neither take a rank's place
	// nor hand a rank a ring (shared-memory links then carry the data
	// outside TLS: rings are files only the two ranks' user can open).
	// Every rank is given credentials of one CA, and its certificate must
	// name the host of its data address. Nil: plaintext.
	Security *secure.Credentials
	// Logger receives setup and failure events; nil discards them.
	Logger *slog.Logger
}

// DefaultConfig returns a Config with every default filled in; the caller
// sets Rank, Size, Master and JobID.
func DefaultConfig() Config {
	return Config{
		Listen:            DefaultListen,
		RingBytes:         DefaultRingBytes,
		SocketBufferBytes: DefaultSocketBufferBytes,
	}
}

// withDefaults returns cfg with zero fields set to their defaults, or an
// error wrapping ErrConfig.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Size < 1 {
		return cfg, fmt.Errorf("%w: size %d, want at least 1", ErrConfig, cfg.Size)
	}
	if cfg.Rank < 0 || cfg.Rank >= cfg.Size {
		return cfg, fmt.Errorf("%w: rank %d not in [0, %d)", ErrConfig, cfg.Rank, cfg.Size)
	}
	if len(cfg.JobID) > MaxJobIDLen {
		return cfg, fmt.Errorf("%w: job id of %d bytes, want at most %d", ErrConfig, len(cfg.JobID), MaxJobIDLen)
	}
	if cfg.Size > 1 && cfg.Master == "" && (cfg.Rank != 0 || cfg.MasterListener == nil) {
		return cfg, fmt.Errorf("%w: no master address (rank 0's rendezvous host:port)", ErrConfig)
	}
	if cfg.MasterListener != nil && cfg.Rank != 0 {
		return cfg, fmt.Errorf("%w: rank %d given a master listener; only rank 0 serves the rendezvous", ErrConfig, cfg.Rank)
	}
	if cfg.Listen == "" {
		cfg.Listen = DefaultListen
	}
	if cfg.RingBytes == 0 {
		cfg.RingBytes = DefaultRingBytes
	}
	if cfg.RingBytes < minRingBytes || cfg.RingBytes > maxRingBytes || cfg.RingBytes&(cfg.RingBytes-1) != 0 {
		return cfg, fmt.Errorf("%w: ring of %d bytes, want a power of two in [%d, %d]", ErrConfig, cfg.RingBytes, minRingBytes, maxRingBytes)
	}
	if cfg.SocketBufferBytes == 0 {
		cfg.SocketBufferBytes = DefaultSocketBufferBytes
	}
	if cfg.HostID == "" {
		cfg.HostID = DefaultHostID()
	}
	if cfg.ShmDir == "" {
		cfg.ShmDir = defaultShmDir()
	}
	if abs, err := filepath.Abs(cfg.ShmDir); err == nil {
		cfg.ShmDir = abs
	}
	if cfg.Size > 1 {
		// A token goes to the rendezvous only over TLS or loopback.
		master := cfg.Master
		if cfg.MasterListener != nil {
			master = cfg.MasterListener.Addr().String()
		}
		if err := cfg.Security.CheckDial(master); err != nil {
			return cfg, fmt.Errorf("%w: %w", ErrConfig, err)
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return cfg, nil
}

// DefaultHostID names this machine: its host name and the kernel's boot
// id, so that two machines that share a host name differ, and ranks in one
// container (one host name, one kernel) match. Containers on one machine
// differ by host name; give them equal Config.HostIDs, and a shared
// /dev/shm, to let them use shared memory.
func DefaultHostID() string {
	name, err := os.Hostname()
	if err != nil {
		name = "unknown"
	}
	if b, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
		name += "/" + strings.TrimSpace(string(b))
	}
	return name
}

// defaultShmDir is /dev/shm where it exists, else the temporary directory.
func defaultShmDir() string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		return "/dev/shm"
	}
	return os.TempDir()
}

// ListenMaster listens for the rendezvous on addr (host:port, port 0 for
// any), for rank 0 to pass as Config.MasterListener while it tells the
// other ranks the listener's address.
func ListenMaster(addr string) (net.Listener, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("collnet: listen for the rendezvous on %s: %w", addr, err)
	}
	return lis, nil
}
