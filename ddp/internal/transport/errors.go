package transport

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
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

// closedPeer matches a PeerError for ErrPeerClosed as it is printed.
var closedPeer = regexp.MustCompile(`rank (\d+): ` + regexp.QuoteMeta(ErrPeerClosed.Error()))

// ClosedPeers reads back, from a worker's printed output, the ranks whose
// connection it saw close: the launcher, which has only the text, looks
// there for the worker that died first.
func ClosedPeers(output string) []int {
	var ranks []int
	for _, m := range closedPeer.FindAllStringSubmatch(output, -1) {
		if r, err := strconv.Atoi(m[1]); err == nil {
			ranks = append(ranks, r)
		}
	}
	return ranks
}

var (
	// ErrPeerClosed: the peer's connection ended (it exited or crashed).
	ErrPeerClosed = errors.New("connection closed (did the process exit or crash?)")
	// ErrTimeout: a peer did not answer within the collective timeout.
	ErrTimeout = errors.New("timed out")
	// ErrMismatch: ranks called different collectives.
	ErrMismatch = errors.New("ddp: ranks called different collectives")
	// ErrGroupClosed: the group was destroyed or broke earlier.
	ErrGroupClosed = errors.New("ddp: process group is not usable")
)

// MismatchError is a disagreement between ranks, with the ranks' account
// of it; it is ErrMismatch.
type MismatchError struct{ Msg string }

func (e *MismatchError) Error() string        { return e.Msg }
func (e *MismatchError) Is(target error) bool { return target == ErrMismatch }
