package nn

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/xla"
)

// newEngine opens the real CPU plugin with n devices and a private compile cache.
func newEngine(t testing.TB, n int) *xla.Engine {
	t.Helper()
	for _, env := range []string{"XLADDP_DEVICE", "PJRT_DEVICE", "XLADDP_CPU_DEVICES", "CPU_NUM_DEVICES", "XLADDP_PJRT_PLUGIN"} {
		t.Setenv(env, "")
	}
	t.Setenv(xla.EnvCacheDir, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := backend.Open(ctx, backend.Options{Target: backend.CPU, CPUDevices: n})
	require.NoError(t, err, "the CPU PJRT plugin must be installed: run `make deps`")
	t.Cleanup(func() { _ = b.Close() })
	return xla.NewEngine(b)
}

func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
