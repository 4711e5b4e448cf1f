package dist

import (
	"errors"
	"fmt"
)

// PeerError is a failure attributed to one rank: it closed its connection,
// stalled past the timeout, or (Reported) another rank reported it failed.
type PeerError struct {
	Rank int
	// Op names the operation that was running, e.g. "AllReduce #12".
	Op  string
	Err error
}

func (e *PeerError) Error() string {
	return fmt.Sprintf("ddp: %s: rank %d: %v", e.Op, e.Rank, e.Err)
}

func (e *PeerError) Unwrap() error { return e.Err }

// ErrPeerClosed: the peer's connection ended (it exited or crashed).
var ErrPeerClosed = errors.New("connection closed (did the process exit or crash?)")

// ErrTimeout: a peer did not answer within the collective timeout.
var ErrTimeout = errors.New("timed out")

// ErrMismatch: ranks called different collectives (debug mode).
var ErrMismatch = errors.New("ddp: ranks called different collectives")

// ErrNoLauncher: a process meant to be one rank of a job was started on
// its own (no RANK, WORLD_SIZE or mpirun variables).
var ErrNoLauncher = errors.New("no launcher started this process")

// ErrGroupClosed: the group was destroyed or broke earlier.
var ErrGroupClosed = errors.New("ddp: process group is not usable")
