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

// TestRestoreNamesAnUnusableNewestCheckpoint: when the newest
// step-N.safetensors of a checkpoint directory is a FIFO, a link to
// /dev/zero, a directory, a link loop or a dangling link, Restore
// refuses at once, naming it and what it is, instead of hanging, filling
// the memory, or resuming from the older step in silence.
func TestRestoreNamesAnUnusableNewestCheckpoint(t *testing.T) {
	ctx := xlatest.Context(t)
	d := xlatest.NewEngine(t, 1).Device(0)
	model := nn.Dense(d, nn.NewRand(1), 2, 1)
	opt, err := optim.NewSGD(nn.Parameters(model), optim.SGDConfig{LR: 0.1})
	require.NoError(t, err)
	newest := "step-000000000002.safetensors"
	for _, tc := range []struct {
		name, want string
		make       func(path string) error
	}{
		{"fifo", "is a FIFO", func(p string) error { return syscall.Mkfifo(p, 0o644) }},
		{"dev-zero", "is a character device", func(p string) error { return os.Symlink("/dev/zero", p) }},
		{"directory", "is a directory, where a checkpoint file belongs", func(p string) error { return os.Mkdir(p, 0o755) }},
		{"loop", "is a link that leads nowhere", func(p string) error { return os.Symlink(p, p) }},
		{"dangling", "is a link that leads nowhere", func(p string) error { return os.Symlink(p+".gone", p) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			state := optim.Checkpoint{Model: model, Optimizer: opt, Step: 1}
			require.NoError(t, checkpoint.Save(ctx, filepath.Join(dir, "step-000000000001.safetensors"), state))
			require.NoError(t, tc.make(filepath.Join(dir, newest)))
			ck, err := checkpoint.New(checkpoint.Options{Dir: dir})
			require.NoError(t, err)
			defer ck.Close()
			resumed, err := ck.Restore(ctx, &state)
			assert.False(t, resumed)
			assert.ErrorContains(t, err, "the newest checkpoint, "+filepath.Join(dir, newest)+", "+tc.want)
			assert.ErrorContains(t, err, "move it away")
		})
	}
}
