//go:build !linux

package collnet

import (
	"errors"
	"time"
)

// shmSupported reports whether this system has the shared-memory
// transport: on this one, pairs always use TCP.
const shmSupported = false

var errNoShm = errors.New("shared memory transport is Linux only")

func createRing(string, int) (*ring, shmOffer, error) { return nil, shmOffer{}, errNoShm }

func openRing(shmOffer) (*ring, error) { return nil, errNoShm }

func (r *ring) unmap() error { return nil }

func futexWait(*uint32, uint32, time.Duration) {}

func futexWake(*uint32) {}
