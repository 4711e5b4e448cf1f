package transport

import (
	"fmt"

	"github.com/xladdp/xladdp/internal/knobs"
)

// EnvShmMiB sets each rank's shared-memory slot in MiB (0 disables the
// shared-memory path of a transport that has one); default 128.
const EnvShmMiB = knobs.EnvShmMiB

// SlotMiB is each rank's shared-memory slot in MiB as $XLADDP_SHM_MIB
// (read through getenv) sets it: 0 turns the path off. A malformed value
// is an error, with the default.
func SlotMiB(getenv func(string) string) (int, error) {
	n, err := knobs.ShmMiB(getenv(EnvShmMiB))
	if err != nil {
		return n, fmt.Errorf("ddp: %w", err)
	}
	return n, nil
}
