package neuron_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/neuron"
	"github.com/xladdp/xladdp/neuron/neurontest"
	"github.com/xladdp/xladdp/xla"
)

// childEnv marks the re-executed test binary that bootstraps the
// libneuronxla 3 stand-in in a process of its own (the bootstrap runs
// once a process, and TestBootstrapWithStandIns embeds Python in this
// one).
const childEnv = "XLADDP_TEST_CHILD"

// TestBootstrapWithSDK3StandIn: libneuronxla 3's road with the stand-in
// for the hardware only: a venv's site-packages with libneuronxla's
// dist-info and libneuronpjrt.so (the CPU plugin), no importable Python.
// The process finds it without running Python, loads the plugin, trains
// as the cpu target does, tells the plugin its PJRT C API version, and
// has no libpython mapped.
func TestBootstrapWithSDK3StandIn(t *testing.T) {
	if os.Getenv(childEnv) == "sdk3" {
		sdk3Child(t)
		return
	}
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !slices.Contains([]string{"PYTHONPATH", "VIRTUAL_ENV", "XLADDP_NEURON_PYTHON", "NEURON_LIBRARY_PATH", "XLADDP_DEVICE", "PJRT_DEVICE"}, k) {
			env = append(env, kv)
		}
	}
	env = append(env, neurontest.StandIn3ForCPU(t, t.TempDir())...)
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestBootstrapWithSDK3StandIn$", "-test.v")
	cmd.Env = append(env, childEnv+"=sdk3", xla.EnvCacheDir+"=off")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "--- PASS: TestBootstrapWithSDK3StandIn")
}

func sdk3Child(t *testing.T) {
	ctx := t.Context()
	cpu, err := backend.Open(ctx, backend.Options{Target: backend.CPU, CPUDevices: 1})
	require.NoError(t, err)
	ecpu := xla.NewEngine(cpu)
	want := trainToyStep(ctx, t, ecpu.Device(0))
	require.NoError(t, ecpu.Close())

	nb, err := backend.Open(ctx, backend.Options{Target: neuron.Target})
	require.NoError(t, err)
	assert.Contains(t, nb.PluginSource(), "libneuronxla "+neurontest.SDK3Version)
	assert.Contains(t, nb.PluginSource(), "no Python")
	assert.Equal(t, filepath.Join(os.Getenv("VIRTUAL_ENV"), "lib", "python3.11", "site-packages", "libneuronxla", "libneuronpjrt.so"), nb.PluginPath())
	assert.Equal(t, backend.ClientAPIVersion(), os.Getenv("NEURON_INTERNAL_PJRT_C_API_VERSION"), "the plugin is told the API version it is spoken to in")
	assert.Equal(t, "0.104", backend.ClientAPIVersion(), "go-xla v0.4.13's header, which docs/trn1.md names")
	en := xla.NewEngine(nb)
	defer en.Close()
	assert.Equal(t, want, trainToyStep(ctx, t, en.Device(0)), "the neuron target trained differently from the cpu target")

	maps, err := os.ReadFile("/proc/self/maps")
	require.NoError(t, err)
	real, err := filepath.EvalSymlinks(nb.PluginPath())
	require.NoError(t, err)
	assert.Contains(t, string(maps), real, "the plugin is mapped")
	assert.NotContains(t, string(maps), "libpython", "libneuronxla 3 needs no Python in the process")
}
