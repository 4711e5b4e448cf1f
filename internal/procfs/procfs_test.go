package procfs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHoldersFindsAChildHoldingAFile: a child process holding a file is
// found with its command line; a file nobody holds is not.
func TestHoldersFindsAChildHoldingAFile(t *testing.T) {
	held := filepath.Join(t.TempDir(), "neuron3")
	f, err := os.Create(held)
	require.NoError(t, err)
	child := exec.Command("sleep", "30")
	child.ExtraFiles = []*os.File{f}
	require.NoError(t, child.Start())
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	f.Close()

	got := Holders("/proc", func(target string) bool { return target == held })
	assert.Equal(t, map[string][]int{held: {child.Process.Pid}}, got)
	assert.Equal(t, "sleep 30", CommandLine("/proc", child.Process.Pid))
	assert.Empty(t, Holders("/proc", func(target string) bool { return target == held+"x" }))
}

// TestHostileProc: a missing or fake /proc, and a huge command line.
func TestHostileProc(t *testing.T) {
	assert.Empty(t, Holders(filepath.Join(t.TempDir(), "absent"), func(string) bool { return true }))
	proc := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(proc, "42"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(proc, "42", "cmdline"), []byte(strings.Repeat("a\x00", 1000)), 0o644))
	cmd := CommandLine(proc, 42)
	assert.True(t, strings.HasSuffix(cmd, "…"))
	assert.LessOrEqual(t, len(cmd), 200+len("…"))
	assert.Equal(t, "command unknown", CommandLine(proc, 43))
	require.NoError(t, os.WriteFile(filepath.Join(proc, "42", "cmdline"), nil, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(proc, "42", "comm"), []byte("trainer\n"), 0o644))
	assert.Equal(t, "trainer", CommandLine(proc, 42))
}

func TestChildrenListsAChild(t *testing.T) {
	cmd := exec.Command("sleep", "5")
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	assert.Contains(t, Children("/proc", os.Getpid()), cmd.Process.Pid)
	assert.Empty(t, Children("/proc", 1<<30), "a pid that does not exist has none")
	assert.Empty(t, Children(t.TempDir(), os.Getpid()), "a proc without it has none")
}
