package zero

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestShardedCheckpointFilesAreBounded: a sharded checkpoint whose
// LATEST or manifest is a link to /dev/zero or /dev/urandom, a FIFO, or
// larger than such a file can be is refused at once, naming the file,
// instead of filling the memory or waiting for a writer.
func TestShardedCheckpointFilesAreBounded(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		make       func(dir string) error
	}{
		{"LATEST to /dev/zero", "LATEST is a character device, not a regular file", func(dir string) error {
			return os.Symlink("/dev/zero", filepath.Join(dir, latestName))
		}},
		{"LATEST a FIFO", "LATEST is a FIFO, not a regular file", func(dir string) error {
			return syscall.Mkfifo(filepath.Join(dir, latestName), 0o644)
		}},
		{"LATEST too large", "more than the 4096 such a file can hold", func(dir string) error {
			return os.WriteFile(filepath.Join(dir, latestName), make([]byte, 5000), 0o644)
		}},
		{"manifest to /dev/urandom", "manifest.json is a character device, not a regular file", func(dir string) error {
			return manifestAs(dir, func(p string) error { return os.Symlink("/dev/urandom", p) })
		}},
		{"manifest a FIFO", "manifest.json is a FIFO, not a regular file", func(dir string) error {
			return manifestAs(dir, func(p string) error { return syscall.Mkfifo(p, 0o644) })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, tc.make(dir))
			_, err := readShardedCheckpoint(dir) // a FIFO opened for reading would wait here for a writer
			assert.ErrorContains(t, err, tc.want)
		})
	}
}

// manifestAs writes LATEST naming step-000000000001 and makes its
// manifest with make.
func manifestAs(dir string, make func(path string) error) error {
	version := filepath.Join(dir, "step-000000000001")
	if err := os.Mkdir(version, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, latestName), []byte("step-000000000001\n"), 0o644); err != nil {
		return err
	}
	return make(filepath.Join(version, manifestName))
}
