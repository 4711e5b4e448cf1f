package zero

import (
	"fmt"
	"io"

	"github.com/xladdp/xladdp/internal/readlimit"
)

// The most a sharded checkpoint's small files hold: LATEST names a
// version; a manifest lists parameters and shards (a few hundred bytes
// each).
const (
	latestMaxBytes   = 4 << 10
	manifestMaxBytes = 64 << 20
)

// readRegular reads path, a regular file of at most limit bytes. A
// device, a FIFO, a socket or a larger file is refused, naming it, before
// anything is read: a link to /dev/zero would otherwise fill the memory,
// a FIFO hang the resume.
func readRegular(path string, limit int64) ([]byte, error) {
	f, err := readlimit.OpenRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if info.Size() > limit {
		return nil, fmt.Errorf("%s holds %d bytes, more than the %d such a file can hold", path, info.Size(), limit)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err == nil && int64(len(b)) > limit {
		err = fmt.Errorf("%s grew past %d bytes while read", path, limit)
	}
	return b, err
}
