package workerenv

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPeerLossNotes: a note is written whole (replaced, never appended)
// and read back; nothing is written without a flight directory; what is
// not a regular file in the note's place (a FIFO, a symlink to
// /dev/zero, a directory) reads as no note, without blocking or reading
// it; a huge note is read to its bound.
func TestPeerLossNotes(t *testing.T) {
	require.NoError(t, WritePeerLossNote("", 3, "nowhere"))
	dir := t.TempDir()
	assert.Empty(t, ReadPeerLossNote(dir, 3), "no note")
	require.NoError(t, WritePeerLossNote(dir, 3, Committing+"step 7"))
	assert.Equal(t, Committing+"step 7", ReadPeerLossNote(dir, 3))
	require.NoError(t, WritePeerLossNote(dir, 3, Committed+"step 7 in ck"))
	assert.Equal(t, Committed+"step 7 in ck", ReadPeerLossNote(dir, 3), "replaced")
	assert.Empty(t, ReadPeerLossNote(dir, 4), "another rank's")
	names, err := filepath.Glob(filepath.Join(dir, "*"))
	require.NoError(t, err)
	assert.Equal(t, []string{PeerLossNote(dir, 3)}, names, "no temporary left")

	require.NoError(t, syscall.Mkfifo(PeerLossNote(dir, 5), 0o644))
	require.NoError(t, os.Symlink("/dev/zero", PeerLossNote(dir, 6)))
	require.NoError(t, os.Mkdir(PeerLossNote(dir, 7), 0o755))
	require.NoError(t, os.WriteFile(PeerLossNote(dir, 8), []byte(Committed+strings.Repeat("x", 1<<20)), 0o644))
	for _, rank := range []int{5, 6, 7} {
		assert.Empty(t, ReadPeerLossNote(dir, rank), "rank %d's note is no regular file", rank)
	}
	assert.Len(t, ReadPeerLossNote(dir, 8), maxNote, "read to its bound")
	assert.Error(t, WritePeerLossNote(filepath.Join(dir, "missing"), 1, "x"), "a flight directory that is gone")
}
