package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Role is what a process does in a job.
type Role uint8

// Roles. The zero Role is invalid so that a Meta left unset is refused.
const (
	RolePS     Role = 1 // a parameter-server shard
	RoleWorker Role = 2 // a worker
)

func (r Role) String() string {
	switch r {
	case RolePS:
		return "ps"
	case RoleWorker:
		return "worker"
	}
	return fmt.Sprintf("Role(%d)", uint8(r))
}

// MetaVersion is the format version Encode writes and the only one Decode
// accepts.
const MetaVersion = 1

// MaxMetaSize is memberlist's cap on node metadata (memberlist.MetaMaxSize).
const MaxMetaSize = 512

// Errors from Meta.Encode and DecodeMeta; the returned errors wrap them with
// the detail.
var (
	ErrMetaTooLarge = errors.New("node metadata too large")
	ErrMetaVersion  = errors.New("unknown node metadata version")
	ErrMetaInvalid  = errors.New("invalid node metadata")
)

// Meta is the metadata a process gossips about itself. It must fit in
// MaxMetaSize bytes once encoded.
type Meta struct {
	Role Role
	// Rank is a worker's rank or a server's shard index.
	Rank int
	// GRPCAddr is the host:port of the process's gRPC server.
	GRPCAddr string
	// DataAddr is the host:port of its data plane (the ring), or empty.
	DataAddr string
	// ModelFingerprint identifies the model the process trains, so that a
	// process from another job is told apart.
	ModelFingerprint uint64
	// PlanVersion is the version of the shard plan the process follows.
	PlanVersion uint64
	// Leaving is set by a node about to leave gracefully, so that the
	// others report its departure as a leave, not a death (memberlist's
	// leave event does not say which it was).
	Leaving bool
}

// Flag bits of the encoding.
const (
	metaFlagLeaving = 1 << iota
	metaFlagsKnown  = metaFlagLeaving
)

// The encoding (version 1), in order: version byte, role byte, flags
// byte (bit 0: leaving; the others must be 0), uvarint
// rank, uvarint length + gRPC address, uvarint length + data address,
// 8 bytes little-endian fingerprint, uvarint plan version. Nothing may
// follow.

// Encode returns m's compact encoding. It refuses an invalid role, a
// negative rank, or an encoding over MaxMetaSize.
func (m Meta) Encode() ([]byte, error) {
	if m.Role != RolePS && m.Role != RoleWorker {
		return nil, fmt.Errorf("%w: role %v, want ps or worker", ErrMetaInvalid, m.Role)
	}
	if m.Rank < 0 || m.Rank > math.MaxInt32 {
		return nil, fmt.Errorf("%w: rank %d, want 0 to %d", ErrMetaInvalid, m.Rank, math.MaxInt32)
	}
	b := make([]byte, 0, 3+3*binary.MaxVarintLen64+len(m.GRPCAddr)+len(m.DataAddr)+8)
	var flags byte
	if m.Leaving {
		flags |= metaFlagLeaving
	}
	b = append(b, MetaVersion, byte(m.Role), flags)
	b = binary.AppendUvarint(b, uint64(m.Rank))
	b = binary.AppendUvarint(b, uint64(len(m.GRPCAddr)))
	b = append(b, m.GRPCAddr...)
	b = binary.AppendUvarint(b, uint64(len(m.DataAddr)))
	b = append(b, m.DataAddr...)
	b = binary.LittleEndian.AppendUint64(b, m.ModelFingerprint)
	b = binary.AppendUvarint(b, m.PlanVersion)
	if len(b) > MaxMetaSize {
		return nil, fmt.Errorf("%w: %d bytes encoded, want at most %d (gRPC address %d bytes, data address %d bytes)",
			ErrMetaTooLarge, len(b), MaxMetaSize, len(m.GRPCAddr), len(m.DataAddr))
	}
	return b, nil
}

// DecodeMeta parses an encoding made by Encode. It refuses an unknown
// version, a truncated or oversized input, trailing bytes and anything
// Encode would not have written.
func DecodeMeta(b []byte) (Meta, error) {
	if len(b) > MaxMetaSize {
		return Meta{}, fmt.Errorf("%w: %d bytes, want at most %d", ErrMetaTooLarge, len(b), MaxMetaSize)
	}
	if len(b) == 0 {
		return Meta{}, fmt.Errorf("%w: empty, want at least a version byte", ErrMetaInvalid)
	}
	if b[0] != MetaVersion {
		return Meta{}, fmt.Errorf("%w: version %d, want %d", ErrMetaVersion, b[0], MetaVersion)
	}
	d := metaDecoder{b: b[1:], off: 1}
	var m Meta
	role := d.byte("role")
	flags := d.byte("flags")
	rank := d.uvarint("rank")
	m.GRPCAddr = d.string("gRPC address")
	m.DataAddr = d.string("data address")
	m.ModelFingerprint = d.uint64("model fingerprint")
	m.PlanVersion = d.uvarint("plan version")
	if d.err != nil {
		return Meta{}, d.err
	}
	if len(d.b) != 0 {
		return Meta{}, fmt.Errorf("%w: %d trailing bytes at offset %d, want none", ErrMetaInvalid, len(d.b), d.off)
	}
	if flags&^metaFlagsKnown != 0 {
		return Meta{}, fmt.Errorf("%w: flags %#02x, want only %#02x set", ErrMetaInvalid, flags, metaFlagsKnown)
	}
	m.Leaving = flags&metaFlagLeaving != 0
	m.Role = Role(role)
	if m.Role != RolePS && m.Role != RoleWorker {
		return Meta{}, fmt.Errorf("%w: role %v, want ps or worker", ErrMetaInvalid, m.Role)
	}
	if rank > math.MaxInt32 {
		return Meta{}, fmt.Errorf("%w: rank %d, want at most %d", ErrMetaInvalid, rank, math.MaxInt32)
	}
	m.Rank = int(rank)
	return m, nil
}

// metaDecoder reads fields in order and keeps the first error.
type metaDecoder struct {
	b   []byte
	off int
	err error
}

func (d *metaDecoder) fail(field, why string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s at offset %d: %s", ErrMetaInvalid, field, d.off, why)
	}
}

func (d *metaDecoder) advance(n int) {
	d.b = d.b[n:]
	d.off += n
}

func (d *metaDecoder) byte(field string) byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 1 {
		d.fail(field, "truncated")
		return 0
	}
	v := d.b[0]
	d.advance(1)
	return v
}

func (d *metaDecoder) uvarint(field string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail(field, "truncated or overlong varint")
		return 0
	}
	if n != len(binary.AppendUvarint(nil, v)) {
		d.fail(field, fmt.Sprintf("varint of %d in %d bytes, want the minimal encoding", v, n))
		return 0
	}
	d.advance(n)
	return v
}

func (d *metaDecoder) string(field string) string {
	n := d.uvarint(field + " length")
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.b)) {
		d.fail(field, fmt.Sprintf("length %d, only %d bytes left", n, len(d.b)))
		return ""
	}
	s := string(d.b[:n])
	d.advance(int(n))
	return s
}

func (d *metaDecoder) uint64(field string) uint64 {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 8 {
		d.fail(field, fmt.Sprintf("truncated: %d bytes left, want 8", len(d.b)))
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b)
	d.advance(8)
	return v
}
