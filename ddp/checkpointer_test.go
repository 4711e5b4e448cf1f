package ddp_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/xla/optim"
)

// TestCheckpointerRefusesAndRestoresNothing: bad options are refused
// with what to give; an empty directory restores nothing; a SIGTERM is
// taken (the process goes on) until Close, which may come twice.
func TestCheckpointerRefusesAndRestoresNothing(t *testing.T) {
	_, err := ddp.NewCheckpointer(ddp.CheckpointerOptions{})
	assert.ErrorContains(t, err, "needs a directory")
	_, err = ddp.NewCheckpointer(ddp.CheckpointerOptions{Dir: t.TempDir(), Every: -1})
	assert.ErrorContains(t, err, "must not be negative")
	file := filepath.Join(t.TempDir(), "a-file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	_, err = ddp.NewCheckpointer(ddp.CheckpointerOptions{Dir: filepath.Join(file, "ck")})
	assert.ErrorContains(t, err, "checkpoint directory")

	ck, err := ddp.NewCheckpointer(ddp.CheckpointerOptions{Dir: t.TempDir(), Every: 5})
	require.NoError(t, err)
	ok, err := ck.Restore(t.Context(), &optim.Checkpoint{})
	require.NoError(t, err)
	assert.False(t, ok, "nothing to restore in an empty directory")
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
	time.Sleep(50 * time.Millisecond) // the process survives: the checkpointer took it
	ck.Close()
	ck.Close()
}
