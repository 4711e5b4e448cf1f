package neuron_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/neuron"
	"github.com/xladdp/xladdp/neuron/neurontest"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
)

// trainToyStep trains the toy 3 steps on d and returns its parameters.
func trainToyStep(ctx context.Context, t *testing.T, d *xla.Device) [][]float32 {
	t.Helper()
	rng := nn.NewRand(3)
	l1, err := nn.NewLinear(d, rng, 10, 10, true)
	require.NoError(t, err)
	l2, err := nn.NewLinear(d, rng, 10, 5, true)
	require.NoError(t, err)
	model := nn.NewSequential(l1, nn.ReLU{}, l2)
	opt, err := optim.NewSGD(nn.Parameters(model), optim.SGDConfig{LR: 0.1})
	require.NoError(t, err)
	xs, ys := make([]float32, 40), make([]float32, 20)
	for i := range xs {
		xs[i] = float32(i%7) / 7
	}
	for i := range ys {
		ys[i] = float32(i%3) / 3
	}
	x, err := xla.FromSlice(d, xs, 4, 10)
	require.NoError(t, err)
	y, err := xla.FromSlice(d, ys, 4, 5)
	require.NoError(t, err)
	for range 3 {
		opt.ZeroGrad()
		require.NoError(t, optim.BackwardStep(ctx, nn.MSELoss(model.Forward(x), y, nn.ReductionMean), opt))
	}
	var out [][]float32
	for _, p := range nn.Parameters(model) {
		v, err := p.Float32s(ctx)
		require.NoError(t, err)
		out = append(out, v)
	}
	return out
}

// TestBootstrapWithStandIns: the neuron target's real road, with stand-ins
// for the hardware only: a Python package named libneuronxla whose
// libneuronpjrt_path() names the CPU plugin, and a neuronx-cc on PATH.
// The bootstrap finds it through the Python lookup, starts the embedded
// interpreter (which imports the package in this very process), and
// backend.Open(Target: Neuron) loads the plugin it named; a training step
// then matches the CPU target's bit for bit.
func TestBootstrapWithStandIns(t *testing.T) {
	ctx := t.Context()
	t.Setenv(xla.EnvCacheDir, "off") // both targets compile, so both counts show
	cpu, err := backend.Open(ctx, backend.Options{Target: backend.CPU, CPUDevices: 1})
	require.NoError(t, err)
	plugin := cpu.PluginPath()
	ecpu := xla.NewEngine(cpu)
	xla.ResetMetrics()
	want := trainToyStep(ctx, t, ecpu.Device(0))
	cpuMetrics := xla.GetMetrics()
	require.NoError(t, ecpu.Close())

	dir := t.TempDir()
	marker := filepath.Join(dir, "imported-by")
	for _, kv := range neurontest.StandIn(t, dir, plugin, marker) {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}

	nb, err := backend.Open(ctx, backend.Options{Target: neuron.Target})
	require.NoError(t, err)
	assert.Equal(t, neuron.Target, nb.Target())
	assert.Equal(t, plugin, nb.PluginPath())
	assert.Contains(t, nb.PluginSource(), "libneuronxla 2.99.0")
	assert.Contains(t, nb.PluginSource(), "embedded Python")
	imported, err := os.ReadFile(marker)
	require.NoError(t, err)
	assert.Contains(t, strings.Fields(string(imported)), strconv.Itoa(os.Getpid()), "the embedded interpreter did not import libneuronxla in this process")
	maps, err := os.ReadFile("/proc/self/maps")
	require.NoError(t, err)
	assert.Contains(t, string(maps), "libpython", "libneuronxla 2 runs in an embedded Python")
	en := xla.NewEngine(nb)
	defer en.Close()
	xla.ResetMetrics()
	assert.Equal(t, want, trainToyStep(ctx, t, en.Device(0)), "the neuron target trained differently from the cpu target")
	neuronMetrics := xla.GetMetrics()
	assert.Positive(t, neuronMetrics.Compilations, "the plugin's compilations are counted")
	assert.Equal(t, cpuMetrics.Compilations, neuronMetrics.Compilations, "the neuron target counts compilations as the cpu target does")
	assert.Equal(t, cpuMetrics.Executions, neuronMetrics.Executions)
}
