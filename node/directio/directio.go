// Package directio reads and writes block devices with O_DIRECT: bulk
// copies of volume data that would otherwise fill the page cache.
package directio

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Open opens a device with O_DIRECT. A copy's data goes to the disk
// as it arrives instead of piling up in the page cache (hundreds of MiB of
// writeback that a small node, or a VM's disk, takes minutes to drain,
// stalling every other I/O meanwhile), and a source is read without
// filling the cache with data this node will not read again. A file
// system without O_DIRECT (a test's tmpfs) gets buffered I/O.
func Open(path string, flag int) (*os.File, error) {
	dev, err := os.OpenFile(path, flag|unix.O_DIRECT, 0)
	if errors.Is(err, unix.EINVAL) {
		dev, err = os.OpenFile(path, flag, 0)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return dev, nil
}

// Buffer is a zeroed buffer of n bytes at a page boundary, as O_DIRECT
// wants it.
func Buffer(n int) []byte {
	const page = 4096
	b := make([]byte, n+page)
	off := 0
	if r := int(uintptr(unsafe.Pointer(&b[0])) % page); r != 0 {
		off = page - r
	}
	return b[off : off+n : off+n]
}
