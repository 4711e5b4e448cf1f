package neuron

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/xladdp/xladdp/neuron/trn"
)

// TestBootstrapNamesWhatIsMissing: every missing piece is an error naming
// it and the command that provides it.
func TestBootstrapNamesWhatIsMissing(t *testing.T) {
	lib := filepath.Join(t.TempDir(), "libpython3.11.so.1.0")
	require.NoError(t, os.WriteFile(lib, nil, 0o600))
	good := pythonEnv{Executable: "/venv/bin/python3", Prefix: "/venv", Version: "3.11", LibPython: lib, NeuronXLA: "2.21.0",
		PluginPath: "/venv/lib/libneuronpjrt.so", NeuronxCC: "/venv/bin/neuronx-cc"}
	require.NoError(t, good.check("python3", envOf(nil)))
	cases := []struct {
		mutate func(e *pythonEnv)
		want   string
	}{
		{func(e *pythonEnv) { e.NeuronXLAError = "ModuleNotFoundError: No module named 'libneuronxla'" }, "pip install libneuronxla"},
		{func(e *pythonEnv) { e.NeuronXLA = "1.9.3" }, "older than 2.0: pip install -U libneuronxla"},
		{func(e *pythonEnv) { e.PluginPath = "" }, "names no plugin"},
		{func(e *pythonEnv) { e.NeuronxCC = "" }, "pip install neuronx-cc"},
		{func(e *pythonEnv) { e.LibPython = "" }, "apt-get install libpython3.11"},
		{func(e *pythonEnv) { e.LibPython = "/nonexistent/libpython3.11.so.1.0" }, "is missing: install it"},
	}
	for _, c := range cases {
		e := good
		c.mutate(&e)
		assert.ErrorContains(t, e.check("python3", envOf(nil)), c.want)
	}
	t.Setenv("PATH", t.TempDir())
	_, _, err := findPython(envOf(nil))
	assert.ErrorContains(t, err, "set $"+trn.EnvPython)
	p, from, err := findPython(envOf(map[string]string{trn.EnvPython: "/opt/py/bin/python3"}))
	require.NoError(t, err)
	assert.Equal(t, "/opt/py/bin/python3", p)
	assert.Equal(t, "$"+trn.EnvPython, from)
	assert.True(t, trn.VersionLess("2.9.1", "2.10"))
	assert.False(t, trn.VersionLess("2.10", "2.9"))
}
