//go:build !unix

package netshape

import (
	"errors"
	"sync/atomic"
)

// mapHostFile needs shared memory mappings, which this system lacks
// here.
func mapHostFile(string) (*[2]atomic.Int64, error) {
	return nil, errors.New("a NIC shared by processes (Config.HostFile) needs a unix system")
}
