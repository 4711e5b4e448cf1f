package backend

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// openCPU opens the real CPU plugin (installed by `make deps`) with n devices.
func openCPU(t *testing.T, n int) *Backend {
	t.Helper()
	clearTargetEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := Open(ctx, Options{Target: CPU, CPUDevices: n})
	require.NoError(t, err, "the CPU PJRT plugin must be installed: run `make deps`")
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func TestOpenCPUListsDevices(t *testing.T) {
	for _, n := range []int{1, 4} {
		b := openCPU(t, n)
		assert.Equal(t, CPU, b.Target())
		assert.Equal(t, "cpu", b.Platform())
		assert.True(t, filepath.IsAbs(b.PluginPath()), b.PluginPath())
		major, minor := b.APIVersion()
		// The plugins we load speak at least 0.83 (older ones may lack what go-xla calls).
		assert.Equal(t, 0, major)
		assert.GreaterOrEqual(t, minor, 83)
		devices := b.Devices()
		require.Len(t, devices, n)
		for i, d := range devices {
			assert.Equal(t, i, d.Num)
			assert.Equal(t, i, d.ID)
			assert.Equal(t, "cpu", d.Kind)
			assert.Equal(t, 0, d.ProcessIndex)
		}
		assert.Equal(t, n, b.GoMLX().NumDevices())
	}
}

// TestSingleDeviceExact runs x·x+1 on values whose results float32 holds
// exactly, so the device must return them bit for bit.
func TestSingleDeviceExact(t *testing.T) {
	b := openCPU(t, 1)
	x := []float32{-3, -0.5, 0, 0.25, 1.5, 2, 1024}
	want := make([]float32, len(x))
	for i, v := range x {
		want[i] = float32(float64(v)*float64(v) + 1)
	}
	g := graph.NewGraph(b.GoMLX(), "x2p1")
	p := graph.Parameter(g, "x", shapes.Make(dtypes.Float32, len(x)))
	g.Compile(graph.AddScalar(graph.Mul(p, p), 1))
	out := g.Run(x)
	require.Len(t, out, 1)
	assert.Equal(t, want, out[0].Value())
}

func TestOpenBadInput(t *testing.T) {
	dir := t.TempDir()
	plain := buildSharedLibrary(t, dir, "libplain.so", plainLibrary)
	nilAPI := buildSharedLibrary(t, dir, "pjrt_c_api_broken_plugin.so", fakePluginNilAPI)
	fifo := filepath.Join(dir, "fifo.so")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))

	tests := []struct {
		name    string
		opts    Options
		env     map[string]string
		wantIs  error
		wantMsg string
	}{
		{"a target no linked package registered", Options{Target: "neuron"}, nil, ErrUnknownTarget,
			`"neuron": this program knows cpu, cuda, gpu (cuda); a target another package provides must be linked`},
		{"unknown target from env", Options{}, map[string]string{EnvPJRTDevice: "TPU"}, ErrUnknownTarget,
			"$PJRT_DEVICE: unknown device target \"TPU\""},
		{"missing plugin path", Options{PluginPath: filepath.Join(dir, "nope.so")}, nil, ErrPluginNotFound,
			"does not exist: check the path, or run `make deps`"},
		{"directory as plugin", Options{PluginPath: dir}, nil, ErrNotPlugin, "is a directory"},
		// dlopen would wait for a writer forever.
		{"FIFO as plugin", Options{PluginPath: fifo}, nil, ErrNotPlugin, fifo + " is a FIFO, not a regular file"},
		{"FIFO as plugin from env", Options{}, map[string]string{EnvPluginPath: fifo}, ErrNotPlugin, "is a FIFO"},
		{"library that is not a plugin", Options{PluginPath: plain}, nil, ErrNotPlugin,
			"does not export GetPjrtApi"},
		{"plugin that returns no API", Options{PluginPath: nilAPI}, nil, ErrNotPlugin,
			"pjrt_c_api_broken_plugin.so: GetPjrtApi returned no API table"},
		{"negative CPU devices", Options{CPUDevices: -1}, nil, ErrBadDeviceCount, "Options.CPUDevices=-1"},
		{"bad CPU_NUM_DEVICES", Options{}, map[string]string{EnvTorchXLACPUDevices: "x"}, ErrBadDeviceCount,
			"$CPU_NUM_DEVICES=\"x\" is not an integer"},
		{"negative replicas", Options{Replicas: -2}, nil, ErrBadDeviceCount, "Options.Replicas=-2"},
		{"more replicas than devices", Options{CPUDevices: 2, Replicas: 4}, nil, ErrBadDeviceCount,
			"4 local replicas asked for but the cpu plugin has 2 addressable device(s)"},
		{"CPU devices on cuda", Options{Target: CUDA, CPUDevices: 2}, nil, ErrBadDeviceCount,
			"CPUDevices=2 is for the cpu target"},
		{"CPU execution mode on cuda", Options{Target: CUDA, CPUExecution: CPUSync}, nil, ErrBadOption,
			`CPUExecution="sync" is for the cpu target`},
		{"bad XLADDP_CPU_EXECUTION", Options{}, map[string]string{EnvCPUExecution: "fast"}, ErrBadOption,
			`$XLADDP_CPU_EXECUTION="fast": use "sync" or "async"`},
		// It used to run on the CPU without a word.
		{"cuda target with the CPU plugin", Options{Target: CUDA, PluginPath: cpuPluginPath(t)}, nil, ErrNotPlugin,
			"the target is cuda but " + cpuPluginPath(t) + " (from option) is a cpu plugin"},
		{"PJRT_DEVICE=cuda with the CPU plugin in the environment", Options{},
			map[string]string{EnvPJRTDevice: "cuda", EnvPluginPath: cpuPluginPath(t)}, ErrNotPlugin,
			"the target is cuda but"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearTargetEnv(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			b, err := Open(context.Background(), tt.opts)
			require.Error(t, err)
			assert.Nil(t, b)
			assert.ErrorIs(t, err, tt.wantIs)
			assert.Contains(t, err.Error(), tt.wantMsg)
		})
	}
}

func TestOpenCancelled(t *testing.T) {
	clearTargetEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Open(ctx, Options{})
	assert.ErrorIs(t, err, context.Canceled)
}

// cpuPluginPath is the CPU plugin `make deps` installs.
func cpuPluginPath(t *testing.T) string {
	home, err := os.UserHomeDir()
	require.NoError(t, err)
	return filepath.Join(home, ".local", "lib", "go-xla", "pjrt_c_api_cpu_plugin.so")
}
