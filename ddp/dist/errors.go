package dist

import (
	"errors"

	"github.com/xladdp/xladdp/ddp/internal/transport"
)

// PeerError is a failure attributed to one rank: it closed its connection,
// stalled past the timeout, or another rank reported it failed.
type PeerError = transport.PeerError

var (
	// ErrPeerClosed: the peer's connection ended (it exited or crashed).
	ErrPeerClosed = transport.ErrPeerClosed
	// ErrTimeout: a peer did not answer within the collective timeout.
	ErrTimeout = transport.ErrTimeout
	// ErrMismatch: ranks called different collectives.
	ErrMismatch = transport.ErrMismatch
	// ErrGroupClosed: the group was destroyed or broke earlier.
	ErrGroupClosed = transport.ErrGroupClosed
)

// ErrNoLauncher: a process meant to be one rank of a job was started on
// its own (no RANK, WORLD_SIZE or mpirun variables).
var ErrNoLauncher = errors.New("no launcher started this process")

// PeerLost reports whether err is a collective's failure because a peer
// was lost: its connection closed (its process or node died), it stopped
// answering within the group's timeout (stopped, or its host gone),
// another rank reported it failed, or the group broke on such a failure
// earlier. A mismatch (ranks called different collectives) is a bug, not
// a loss.
func PeerLost(err error) bool {
	var pe *PeerError
	if errors.Is(err, ErrMismatch) {
		return false
	}
	return errors.As(err, &pe) || errors.Is(err, ErrPeerClosed) || errors.Is(err, ErrTimeout) || errors.Is(err, ErrGroupClosed)
}
