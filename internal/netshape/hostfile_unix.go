//go:build unix

package netshape

import (
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// mapHostFile maps the two line clocks of Config.HostFile, creating the
// file if it is missing. The mapping lasts as long as the process: a
// conn may still reserve on a line after its NIC is closed, and the
// page is small.
func mapHostFile(path string) (*[2]atomic.Int64, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	const size = int(unsafe.Sizeof([2]atomic.Int64{}))
	if st, err := f.Stat(); err != nil {
		return nil, err
	} else if st.Size() < int64(size) {
		// Only the first to open it grows it; Truncate to the same size
		// keeps what another process wrote.
		if err := f.Truncate(int64(size)); err != nil {
			return nil, err
		}
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	return (*[2]atomic.Int64)(unsafe.Pointer(&b[0])), nil
}
