package knobs

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// MaxTimeout bounds $XLADDP_TIMEOUT: a longer wait is a hang.
const MaxTimeout = 24 * time.Hour

// Timeout reads $XLADDP_TIMEOUT's value v (set): a Go duration or
// seconds, above 0 and at most MaxTimeout.
func Timeout(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	d, err := time.ParseDuration(v)
	if secs, serr := strconv.ParseFloat(v, 64); err != nil && serr == nil && secs > 0 && secs <= MaxTimeout.Seconds() {
		d, err = time.Duration(secs*float64(time.Second)), nil
	}
	if err != nil || d <= 0 || d > MaxTimeout {
		return 0, fmt.Errorf("$%s=%q: give the collective timeout as a duration (90s, 15m) or seconds, above 0 and at most %s",
			EnvTimeout, v, MaxTimeout)
	}
	return d, nil
}

// Shared-memory slot bounds ($XLADDP_SHM_MIB).
const (
	DefaultShmMiB = 128
	// MaxShmMiB bounds a slot (a typo must not reserve all of /dev/shm).
	MaxShmMiB = 1 << 16
)

// ShmMiB reads $XLADDP_SHM_MIB's value v: each rank's shared-memory slot
// in MiB, 0 turning the path off; unset, the default. A malformed value
// is an error, with the default.
func ShmMiB(v string) (int, error) {
	if v == "" {
		return DefaultShmMiB, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 || n > MaxShmMiB {
		return DefaultShmMiB, fmt.Errorf("$%s=%q: give a slot size in MiB from 0 (no shared memory) to %d (default %d)",
			EnvShmMiB, v, MaxShmMiB, DefaultShmMiB)
	}
	return n, nil
}

// FlightSize reads $XLADDP_FLIGHT_SIZE's value v (set): how many
// operations the flight record keeps, 0 turning it off.
func FlightSize(v string, defaultSize, maxSize int) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 || n > maxSize {
		return 0, fmt.Errorf("$%s=%q: want how many operations the flight record keeps, at most %d (default %d; 0 turns it off)",
			EnvFlightSize, v, maxSize, defaultSize)
	}
	return n, nil
}

// MaxCPUDevices bounds the CPU client's device count.
const MaxCPUDevices = 1024

// CPUDevices reads a CPU device count variable's value v (set).
func CPUDevices(name, v string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		return 0, fmt.Errorf("$%s=%q is not an integer: set it to a count from 1 to %d", name, v, MaxCPUDevices)
	}
	if n < 1 || n > MaxCPUDevices {
		return 0, fmt.Errorf("$%s=%d: the CPU device count must be from 1 to %d", name, n, MaxCPUDevices)
	}
	return n, nil
}

// oneOf reads v, made canonical by canon, as one of words; unset reads
// as "". The error quotes v as given.
func oneOf(name, v string, canon func(string) string, words []string, want string) (string, error) {
	if w := canon(v); w == "" || slices.Contains(words, w) {
		return w, nil
	}
	return "", fmt.Errorf("$%s=%q: %s", name, v, want)
}

// exact leaves a value as given; lowerTrimmed ignores case and spaces.
func exact(v string) string        { return v }
func lowerTrimmed(v string) string { return strings.ToLower(strings.TrimSpace(v)) }

// CPUKernels reads $XLADDP_CPU_KERNELS: onednn, xla, or "" (oneDNN where
// it loads).
func CPUKernels(v string) (string, error) {
	return oneOf(EnvCPUKernels, v, exact, []string{"onednn", "xla"}, "want onednn or xla (unset: oneDNN where libdnnl.so.2 loads)")
}

// CPUExecution reads $XLADDP_CPU_EXECUTION: sync, async, or "" (sync).
func CPUExecution(v string) (string, error) {
	return oneOf(EnvCPUExecution, v, strings.TrimSpace, []string{"sync", "async"}, `use "sync" or "async"`)
}

// Deterministic reads $XLADDP_DETERMINISTIC: 1 or 0 (unset: 0).
func Deterministic(v string) (bool, error) {
	w, err := oneOf(EnvDeterministic, v, strings.TrimSpace, []string{"0", "1"}, "use 1 or 0")
	return w == "1", err
}

// CompileOnly reads $XLADDP_COMPILE_ONLY: a boolean (unset: off).
func CompileOnly(v string) (bool, error) {
	if v == "" {
		return false, nil
	}
	on, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("$%s=%q: want 1 (compile without executing) or 0", EnvCompileOnly, v)
	}
	return on, nil
}

// SharePrograms reads $XLADDP_SHARE_PROGRAMS: on unless off.
func SharePrograms(v string) (bool, error) { return onUnlessOff(EnvSharePrograms, v) }

// ZeroBuddies reads $XLADDP_ZERO_BUDDIES: on unless off.
func ZeroBuddies(v string) (bool, error) { return onUnlessOff(EnvZeroBuddies, v) }

// onUnlessOff reads a switch that is on unless set off.
func onUnlessOff(name, v string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "on", "1", "true":
		return true, nil
	case "off", "0", "false":
		return false, nil
	}
	return false, fmt.Errorf("$%s=%q: want on or off (1 or 0, true or false)", name, v)
}

// Transport reads $XLADDP_BACKEND: tcp, mpi, or "" (tcp), without
// regard to case or spaces.
func Transport(v string) (string, error) {
	return oneOf(EnvBackend, v, lowerTrimmed, []string{"tcp", "mpi"}, "want tcp (the default) or mpi")
}

// MPIReduceOrder reads $XLADDP_MPI_REDUCE_ORDER: whether sums go in rank
// order (rank) or MPI's (mpi, or unset).
func MPIReduceOrder(v string) (bool, error) {
	switch v {
	case "", "mpi":
		return false, nil
	case "rank":
		return true, nil
	}
	return false, fmt.Errorf("$%s is %q: use mpi (MPI's own order, the default) or rank (rank order, as the tcp backend)",
		EnvMPIReduceOrder, v)
}

// MPIThreads reads an MPI thread level (XLADDP_MPI_THREADS): multiple
// (or unset), serialized or funneled, with or without MPI_THREAD_.
func MPIThreads(v string) (string, error) {
	w := strings.TrimPrefix(strings.ToLower(strings.TrimSpace(v)), "mpi_thread_")
	switch w {
	case "", "multiple":
		return "multiple", nil
	case "serialized", "funneled":
		return w, nil
	}
	return "", fmt.Errorf("thread level %q: want multiple, serialized or funneled", v)
}
