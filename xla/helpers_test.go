package xla

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/backend"
)

// keepCacheDir is set by the persistent-cache helper process, which must use
// the cache directory its parent test gave it.
var keepCacheDir = os.Getenv("XLADDP_TEST_KEEP_CACHE_DIR") == "1"

// newEngine opens the real CPU plugin with n devices, executing in the mode
// $XLADDP_CPU_EXECUTION names (`make test` runs this package in both).
func newEngine(t testing.TB, n int) *Engine {
	t.Helper()
	return newEngineExecuting(t, n, "")
}

// newEngineExecuting opens the CPU plugin with n devices in the given
// execution mode ("": the environment's, else the default).
func newEngineExecuting(t testing.TB, n int, mode backend.CPUExecution) *Engine {
	t.Helper()
	for _, env := range []string{"XLADDP_DEVICE", "PJRT_DEVICE", "XLADDP_CPU_DEVICES", "CPU_NUM_DEVICES", "XLADDP_PJRT_PLUGIN"} {
		t.Setenv(env, "")
	}
	// Each test compiles from scratch unless it shares a cache on purpose.
	if os.Getenv(EnvCacheDir) == "" || !keepCacheDir {
		t.Setenv(EnvCacheDir, t.TempDir())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := backend.Open(ctx, backend.Options{Target: backend.CPU, CPUDevices: n, CPUExecution: mode})
	require.NoError(t, err, "the CPU PJRT plugin must be installed: run `make deps`")
	e := NewEngine(b)
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// mustFromSlice uploads host data or fails the test.
func mustFromSlice(t testing.TB, d *Device, data []float32, dims ...int) *Tensor {
	t.Helper()
	x, err := FromSlice(d, data, dims...)
	require.NoError(t, err)
	return x
}

func toFloat64(xs []float32) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = float64(x)
	}
	return out
}
