package xla

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/xla/internal/progcache"
)

// cacheRun computes x·k + 1 for a fresh engine sharing dir, with k decided
// by which program is asked for, and reports the value and what the run
// compiled and loaded.
func cacheRun(t *testing.T, dir string, program string, mutate func(*Engine)) (got []float32, compiled, loaded int64) {
	e := newEngineIn(t, dir)
	if mutate != nil {
		mutate(e)
	}
	d := e.Device(0)
	x := mustFromSlice(t, d, []float32{1, 2, 3}, 3)
	var y *Tensor
	switch program {
	case "A":
		y = x.MulScalar(2).AddScalar(1)
	case "B":
		y = x.Exp().AddScalar(1) // same shapes, another program
	}
	before := GetMetrics()
	got, err := y.Float32s(testContext(t))
	require.NoError(t, err)
	after := GetMetrics()
	return got, after.Compilations - before.Compilations, after.PersistentCacheHits - before.PersistentCacheHits
}

// newEngineIn opens a one-device engine whose persistent cache is dir.
func newEngineIn(t *testing.T, dir string) *Engine {
	t.Helper()
	for _, env := range []string{"XLADDP_DEVICE", "PJRT_DEVICE", "XLADDP_CPU_DEVICES", "CPU_NUM_DEVICES", "XLADDP_PJRT_PLUGIN"} {
		t.Setenv(env, "")
	}
	t.Setenv(EnvCacheDir, dir)
	b, err := backend.Open(testContext(t), backend.Options{Target: backend.CPU, CPUDevices: 1})
	require.NoError(t, err)
	e := NewEngine(b)
	t.Cleanup(func() { _ = e.Close() })
	require.Equal(t, dir, e.cache.disk.Dir)
	return e
}

// TestPersistentCacheKeyCoversTheProgram: the disk cache is keyed by
// everything that decides the executable, and a loaded file is checked
// against what was asked. A valid cache file of another program stored
// under this program's name, a change in how programs lower, and another
// XLA_FLAGS each recompile, and the results stay right.
func TestPersistentCacheKeyCoversTheProgram(t *testing.T) {
	dir := t.TempDir()
	wantA := []float32{3, 5, 7}
	gotA, compiled, _ := cacheRun(t, dir, "A", nil)
	require.Equal(t, wantA, gotA)
	require.EqualValues(t, 1, compiled)
	filesA, _ := filepath.Glob(filepath.Join(dir, "*.xlaexec"))
	require.Len(t, filesA, 1)
	gotB, _, _ := cacheRun(t, dir, "B", nil)
	files, _ := filepath.Glob(filepath.Join(dir, "*.xlaexec"))
	require.Len(t, files, 2)
	fileB := files[0]
	if fileB == filesA[0] {
		fileB = files[1]
	}

	_, compiled, loaded := cacheRun(t, dir, "A", nil)
	assert.EqualValues(t, 0, compiled, "an unchanged program loads from disk")
	assert.EqualValues(t, 1, loaded)

	t.Run("swapped file", func(t *testing.T) {
		a, err := os.ReadFile(filesA[0])
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(fileB, a, 0o644))
		got, compiled, loaded := cacheRun(t, dir, "B", nil)
		assert.Equal(t, gotB, got, "program B's results, not A's")
		assert.EqualValues(t, 1, compiled, "the foreign file is not used")
		assert.EqualValues(t, 0, loaded)
	})
	t.Run("changed lowering", func(t *testing.T) {
		got, compiled, loaded := cacheRun(t, dir, "A", func(e *Engine) { e.cache.disk.Lowering = "another build of xladdp" })
		assert.Equal(t, wantA, got)
		assert.EqualValues(t, 1, compiled)
		assert.EqualValues(t, 0, loaded)
	})
	t.Run("changed XLA_FLAGS", func(t *testing.T) {
		t.Setenv("XLA_FLAGS", "--xla_dump_hlo_as_text")
		got, compiled, loaded := cacheRun(t, dir, "A", func(e *Engine) {
			assert.Equal(t, "--xla_dump_hlo_as_text", e.cache.disk.XLAFlags)
		})
		assert.Equal(t, wantA, got)
		assert.EqualValues(t, 1, compiled)
		assert.EqualValues(t, 0, loaded)
	})
	t.Run("a header rewritten to match, with another program's executable", func(t *testing.T) {
		// An executable with a different number of outputs under a header
		// that claims this program's: caught by checking the executable.
		e := newEngine(t, 1)
		d := e.Device(0)
		x := mustFromSlice(t, d, []float32{1, 2, 3}, 3)
		two := []*Tensor{x.AddScalar(2), x.MulScalar(3)}
		require.NoError(t, d.MarkStep(testContext(t)))
		runtime.KeepAlive(two)
		var twoOutputs []byte
		for _, p := range e.cache.last {
			data, err := e.backend.SerializeExecutable(p.exec)
			require.NoError(t, err)
			twoOutputs = data
		}
		require.NotEmpty(t, twoOutputs)
		raw, err := os.ReadFile(filesA[0])
		require.NoError(t, err)
		h, _, err := progcache.ParseFile(raw)
		require.NoError(t, err)
		forged := &progcache.Disk{Dir: dir}
		require.NoError(t, forged.Store(h, twoOutputs))
		got, compiled, loaded := cacheRun(t, dir, "A", nil)
		assert.Equal(t, wantA, got)
		assert.EqualValues(t, 1, compiled)
		assert.EqualValues(t, 0, loaded)
	})
}
