package checkpoint_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/ddp/checkpoint"
)

// TestOwnerFileIsARegularFile: an owner file someone replaced with a
// FIFO, a link (to /dev/zero or to a file) or a directory is refused
// naming what it is, at once, and nothing behind a link is written.
func TestOwnerFileIsARegularFile(t *testing.T) {
	elsewhere := filepath.Join(t.TempDir(), "precious")
	require.NoError(t, os.WriteFile(elsewhere, []byte("keep"), 0o644))
	for _, tc := range []struct {
		name string
		make func(path string) error
		want string
	}{
		{"a FIFO", func(p string) error { return syscall.Mkfifo(p, 0o644) }, "is a FIFO, not a regular file: remove it"},
		{"a link to /dev/zero", func(p string) error { return os.Symlink("/dev/zero", p) }, "is a symbolic link, not a regular file: remove it"},
		{"a link to a file", func(p string) error { return os.Symlink(elsewhere, p) }, "is a symbolic link, not a regular file: remove it"},
		{"a directory", func(p string) error { return os.Mkdir(p, 0o755) }, "remove it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, tc.make(filepath.Join(dir, checkpoint.OwnerFile)))
			ck, err := checkpoint.New(checkpoint.Options{Dir: dir})
			if err == nil {
				ck.Close()
			}
			assert.ErrorContains(t, err, tc.want)
			assert.ErrorContains(t, err, filepath.Join(dir, checkpoint.OwnerFile))
		})
	}
	b, err := os.ReadFile(elsewhere)
	require.NoError(t, err)
	assert.Equal(t, "keep", string(b))
}
