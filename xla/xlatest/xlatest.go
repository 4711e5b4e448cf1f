// Package xlatest opens real CPU engines for tests of the packages built on
// xla (nn, optim, data, ddp, examples), like GoMLX's graphtest.
package xlatest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/xla"
)

// NewEngine opens the real CPU plugin (installed by `make deps`) with n
// devices, ignoring the target variables of the environment, and gives the
// test a private compile cache. The backend closes when the test ends.
func NewEngine(t testing.TB, n int) *xla.Engine {
	t.Helper()
	return open(t, backend.Options{Target: backend.CPU, CPUDevices: n})
}

// NewDeterministicEngine is NewEngine with the backend's deterministic
// mode (backend.Options.Deterministic), which ddp.Deterministic needs; a
// test process's first engine fixes the mode for the process.
func NewDeterministicEngine(t testing.TB, n int) *xla.Engine {
	t.Helper()
	return open(t, backend.Options{Target: backend.CPU, CPUDevices: n, Deterministic: true})
}

func open(t testing.TB, opts backend.Options) *xla.Engine {
	t.Helper()
	for _, env := range []string{backend.EnvDevice, backend.EnvPJRTDevice, backend.EnvCPUDevices,
		backend.EnvTorchXLACPUDevices, backend.EnvPluginPath} {
		t.Setenv(env, "")
	}
	t.Setenv(xla.EnvCacheDir, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := backend.Open(ctx, opts)
	require.NoError(t, err, "the CPU PJRT plugin must be installed: run `make deps`")
	e := xla.NewEngine(b)
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// Context returns a context that ends with the test or after 5 minutes.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
