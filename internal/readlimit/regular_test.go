package readlimit

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOpenRegular: a regular file (or a link to one) opens; a FIFO (whose
// plain open waits for a writer), a device, a directory and a socket are
// refused by name and kind without blocking.
func TestOpenRegular(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o644))
	link := filepath.Join(dir, "link")
	require.NoError(t, os.Symlink(file, link))
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	for _, ok := range []string{file, link} {
		f, err := OpenRegular(ok)
		require.NoError(t, err, ok)
		require.NoError(t, f.Close())
	}
	for path, want := range map[string]string{
		fifo:        "is a FIFO, not a regular file",
		"/dev/zero": "is a character device, not a regular file",
		dir:         "is a directory, not a regular file",
	} {
		assert.ErrorContains(t, CheckRegular(path), path+" "+want)
	}
	assert.ErrorIs(t, CheckRegular(filepath.Join(dir, "missing")), os.ErrNotExist)
}
