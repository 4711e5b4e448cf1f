package transport

import (
	"fmt"
	"strconv"
	"strings"
)

// EnvShmMiB sets each rank's shared-memory slot in MiB (0 disables the
// shared-memory path of a transport that has one); default 128.
const EnvShmMiB = "XLADDP_SHM_MIB"

const (
	defaultShmMiB = 128
	// maxShmMiB bounds a slot (a typo must not reserve all of /dev/shm).
	maxShmMiB = 1 << 16
)

// SlotMiB is each rank's shared-memory slot in MiB as $XLADDP_SHM_MIB
// (read through getenv) sets it: 0 turns the path off. A malformed value
// is an error, with the default. Here rather than in the tcp transport,
// so that ddprun's doctor reads it without linking a transport.
func SlotMiB(getenv func(string) string) (int, error) {
	v := getenv(EnvShmMiB)
	if v == "" {
		return defaultShmMiB, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 || n > maxShmMiB {
		return defaultShmMiB, fmt.Errorf("ddp: $%s=%q: give a slot size in MiB from 0 (no shared memory) to %d (default %d)",
			EnvShmMiB, v, maxShmMiB, defaultShmMiB)
	}
	return n, nil
}
