package collnet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The data-plane handshake. The lower rank of a pair dials the higher and
// sends a hello; the higher answers with a verdict:
//
//	hello:   magic [8]byte | from uint32 | to uint32 | size uint32 | len(job) uint16 | job
//	verdict: ok uint8 (1 accepted, 0 refused) | len(reason) uint16 | reason
//
// Integers are big-endian. A refused or malformed handshake closes the
// connection; the acceptor keeps waiting for the ranks it expects.

// helloMagic starts every hello; its last byte is the protocol version.
var helloMagic = [8]byte{'s', 'h', 'o', 'a', 'l', 'c', 'n', 1}

const helloFixed = 8 + 4 + 4 + 4 + 2

// maxReason bounds a refusal's text.
const maxReason = 1024

// hello is what a dialing rank says first.
type hello struct {
	From, To, Size int
	JobID          string
}

// errHandshake marks a malformed or refused handshake.
var errHandshake = errors.New("handshake")

// appendHello encodes h.
func appendHello(b []byte, h hello) []byte {
	b = append(b, helloMagic[:]...)
	b = binary.BigEndian.AppendUint32(b, uint32(h.From))
	b = binary.BigEndian.AppendUint32(b, uint32(h.To))
	b = binary.BigEndian.AppendUint32(b, uint32(h.Size))
	b = binary.BigEndian.AppendUint16(b, uint16(len(h.JobID)))
	return append(b, h.JobID...)
}

// readHello decodes a hello from r, reading no more than it holds.
func readHello(r io.Reader) (hello, error) {
	var fixed [helloFixed]byte
	if _, err := io.ReadFull(r, fixed[:]); err != nil {
		return hello{}, fmt.Errorf("%w: reading hello: %w", errHandshake, err)
	}
	if [8]byte(fixed[:8]) != helloMagic {
		return hello{}, fmt.Errorf("%w: bad magic %q, want %q (not a collnet peer, or another version)", errHandshake, fixed[:8], helloMagic[:])
	}
	h := hello{
		From: int(binary.BigEndian.Uint32(fixed[8:])),
		To:   int(binary.BigEndian.Uint32(fixed[12:])),
		Size: int(binary.BigEndian.Uint32(fixed[16:])),
	}
	n := int(binary.BigEndian.Uint16(fixed[20:]))
	if n > MaxJobIDLen {
		return hello{}, fmt.Errorf("%w: job id of %d bytes, want at most %d", errHandshake, n, MaxJobIDLen)
	}
	job := make([]byte, n)
	if _, err := io.ReadFull(r, job); err != nil {
		return hello{}, fmt.Errorf("%w: reading job id: %w", errHandshake, err)
	}
	h.JobID = string(job)
	return h, nil
}

// check verifies that h is a hello rank me (of size ranks in job) expects
// from a lower rank.
func (h hello) check(me, size int, job string) error {
	switch {
	case h.JobID != job:
		return fmt.Errorf("%w: rank %d of job %q dialed job %q", errHandshake, h.From, h.JobID, job)
	case h.Size != size:
		return fmt.Errorf("%w: rank %d has world size %d, want %d", errHandshake, h.From, h.Size, size)
	case h.To != me:
		return fmt.Errorf("%w: rank %d dialed rank %d, but this is rank %d", errHandshake, h.From, h.To, me)
	case h.From < 0 || h.From >= me:
		return fmt.Errorf("%w: rank %d dialed rank %d; only ranks in [0, %d) dial it", errHandshake, h.From, me, me)
	}
	return nil
}

// appendVerdict encodes an answer to a hello: accepted when reason is
// empty.
func appendVerdict(b []byte, reason string) []byte {
	if len(reason) > maxReason {
		reason = reason[:maxReason]
	}
	ok := byte(0)
	if reason == "" {
		ok = 1
	}
	b = append(b, ok)
	b = binary.BigEndian.AppendUint16(b, uint16(len(reason)))
	return append(b, reason...)
}

// readVerdict decodes an answer to a hello: nil when accepted.
func readVerdict(r io.Reader) error {
	var fixed [3]byte
	if _, err := io.ReadFull(r, fixed[:]); err != nil {
		return fmt.Errorf("%w: reading the answer to hello: %w", errHandshake, err)
	}
	n := int(binary.BigEndian.Uint16(fixed[1:]))
	if n > maxReason {
		return fmt.Errorf("%w: refusal of %d bytes, want at most %d", errHandshake, n, maxReason)
	}
	reason := make([]byte, n)
	if _, err := io.ReadFull(r, reason); err != nil {
		return fmt.Errorf("%w: reading the answer to hello: %w", errHandshake, err)
	}
	switch {
	case fixed[0] == 1 && n == 0:
		return nil
	case fixed[0] == 0:
		return fmt.Errorf("%w: refused: %s", errHandshake, reason)
	default:
		return fmt.Errorf("%w: malformed answer to hello (ok %d, %d bytes of reason)", errHandshake, fixed[0], n)
	}
}
