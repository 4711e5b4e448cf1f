package workerenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/xladdp/xladdp/internal/atomicfile"
)

// A worker whose collective lost a peer commits the last step it
// completed and exits ExitPreempted; it says so in its note in FlightDir,
// which its agent reads to tell that exit from a preemption (it restarts
// the job without the lost node, where a preemption ends it) and to wait
// for a commit under way before stopping the worker.
const (
	peerLossPrefix = "peer-lost-rank-"
	// Committing starts the note of a commit under way; Committed that of
	// one done.
	Committing = "committing "
	Committed  = "committed "
)

// PeerLossNote is rank's note in the flight directory dir.
func PeerLossNote(dir string, rank int) string {
	return filepath.Join(dir, fmt.Sprintf("%s%d.txt", peerLossPrefix, rank))
}

// WritePeerLossNote replaces rank's note in dir (FlightDir; nothing
// without one) with text, atomically.
func WritePeerLossNote(dir string, rank int, text string) error {
	if dir == "" {
		return nil
	}
	return atomicfile.Write(PeerLossNote(dir, rank), []byte(text+"\n"))
}

// maxNote bounds what ReadPeerLossNote reads of a note.
const maxNote = 4 << 10

// ReadPeerLossNote is rank's note in dir, "" when there is none (or it
// is no regular file).
func ReadPeerLossNote(dir string, rank int) string {
	path := PeerLossNote(dir, rank)
	if info, err := os.Lstat(path); err != nil || !info.Mode().IsRegular() {
		return ""
	}
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	buf := make([]byte, maxNote)
	n, _ := f.Read(buf)
	return strings.TrimSpace(string(buf[:n]))
}
