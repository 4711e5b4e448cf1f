package checkpoint_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/ddp/checkpoint"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
	"github.com/xladdp/xladdp/xla/xlatest"
)

// TestCheckFileTarget: a checkpoint file may replace a regular file or
// take a missing name, never a device (/dev/null became a file once), a
// FIFO, a directory or a symbolic link.
func TestCheckFileTarget(t *testing.T) {
	dir := t.TempDir()
	regular := filepath.Join(dir, "ck.safetensors")
	require.NoError(t, os.WriteFile(regular, []byte("x"), 0o644))
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	link := filepath.Join(dir, "link.safetensors")
	require.NoError(t, os.Symlink(regular, link))
	for _, tc := range []struct{ path, want string }{
		{filepath.Join(dir, "new.safetensors"), ""},
		{regular, ""},
		{"/dev/null", "is not a regular file"},
		{fifo, "is not a regular file"},
		{dir, "is a directory"},
		{link, "is a symbolic link"},
	} {
		err := checkpoint.CheckFileTarget(tc.path)
		if tc.want == "" {
			assert.NoError(t, err, tc.path)
		} else {
			assert.ErrorContains(t, err, tc.want, tc.path)
		}
	}
	info, err := os.Lstat("/dev/null")
	require.NoError(t, err)
	assert.NotZero(t, info.Mode()&os.ModeCharDevice, "/dev/null is still a device")
}

// TestLoadRefusesWhatIsNoFile: Load names a device, a FIFO, a directory
// and a symlink loop at once, reading nothing and waiting for no writer.
func TestLoadRefusesWhatIsNoFile(t *testing.T) {
	ctx := xlatest.Context(t)
	d := xlatest.NewEngine(t, 1).Device(0)
	model := nn.Dense(d, nn.NewRand(1), 2, 1)
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	loop := filepath.Join(dir, "loop")
	require.NoError(t, os.Symlink(loop, loop))
	for _, tc := range []struct{ path, want string }{
		{"/dev/zero", "is not a regular file"},
		{fifo, "is not a regular file"},
		{dir, "a directory of ZeRO shards"},
		{loop, "too many levels of symbolic links"},
	} {
		err := checkpoint.Load(ctx, tc.path, &optim.Checkpoint{Model: model})
		assert.ErrorContains(t, err, tc.want, tc.path)
	}
}
