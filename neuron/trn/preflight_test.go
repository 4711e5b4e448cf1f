package trn

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeRoot makes dev/neuron0..n-1 and a process holding device held.
func fakeRoot(t *testing.T, devices, held, pid int) string {
	t.Helper()
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "dev"), 0o755))
	for d := range devices {
		require.NoError(t, os.WriteFile(filepath.Join(root, "dev", "neuron"+strconv.Itoa(d)), nil, 0o600))
	}
	if held >= 0 {
		fd := filepath.Join(root, "proc", strconv.Itoa(pid), "fd")
		require.NoError(t, os.MkdirAll(fd, 0o755))
		require.NoError(t, os.Symlink("/dev/neuron"+strconv.Itoa(held), filepath.Join(fd, "7")))
		require.NoError(t, os.WriteFile(filepath.Join(root, "proc", strconv.Itoa(pid), "cmdline"), []byte("python\x00train.py\x00"), 0o600))
	}
	return root
}

// TestPreflight: each problem is found and reported with its fix.
func TestPreflight(t *testing.T) {
	lib := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(lib, "libnrt.so.1"), nil, 0o600))

	root := fakeRoot(t, 2, -1, 0)
	assert.Empty(t, Preflight(PreflightOptions{Root: root, LibraryDirs: []string{lib}}), "a healthy machine")

	problems := Preflight(PreflightOptions{Root: t.TempDir(), LibraryDirs: []string{t.TempDir()}})
	require.Len(t, problems, 2)
	assert.Contains(t, problems[0].String(), "no Neuron device (/dev/neuron*): run on a Trainium instance")
	assert.Contains(t, problems[1].String(), "libnrt.so.1) is not installed: install aws-neuronx-runtime-lib")

	root = fakeRoot(t, 2, 1, 4242)
	problems = Preflight(PreflightOptions{Root: root, LibraryDirs: []string{lib}, Cores: []int{2, 3}})
	require.Len(t, problems, 1)
	assert.Equal(t, "NeuronCore(s) of /dev/neuron1 are held by pid 4242 (python train.py): stop that process (kill 4242; a finished job's orphan keeps the cores) or give this job other cores with NEURON_RT_VISIBLE_CORES",
		problems[0].String())
	assert.Empty(t, Preflight(PreflightOptions{Root: root, LibraryDirs: []string{lib}, Cores: []int{0, 1}}), "cores 0-1 are on device 0, free")
}
