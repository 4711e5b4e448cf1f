package backend

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// Sources of shared libraries the tests build with the C compiler: real ELF
// files that exercise the validation and loading paths without a real plugin.
const (
	// fakePluginNilAPI exports GetPjrtApi but returns no API table, the way a
	// plugin that fails its own initialisation does.
	fakePluginNilAPI = `void* GetPjrtApi(void) { return 0; }`
	// plainLibrary is a shared library that is not a plugin.
	plainLibrary = `int answer(void) { return 42; }`
)

// buildSharedLibrary compiles source into dir/name with cc and returns its path.
func buildSharedLibrary(t *testing.T, dir, name, source string) string {
	t.Helper()
	src := filepath.Join(t.TempDir(), "lib.c")
	require.NoError(t, os.WriteFile(src, []byte(source), 0o644))
	require.NoError(t, os.MkdirAll(dir, 0o755))
	out := filepath.Join(dir, name)
	cmd := exec.Command("cc", "-shared", "-fPIC", "-o", out, src)
	output, err := cmd.CombinedOutput()
	require.NoError(t, err, "cc must be installed to build test libraries: %s", output)
	return out
}

// clearTargetEnv unsets every variable Open reads, so tests see only what they set.
func clearTargetEnv(t testing.TB) {
	t.Helper()
	for _, name := range []string{EnvDevice, EnvPJRTDevice, EnvPluginPath, EnvCPUDevices,
		EnvTorchXLACPUDevices, envGoXLAPluginPaths, EnvPython, EnvCPUExecution} {
		t.Setenv(name, "")
	}
}
