package xla

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCompileOnlyCompilesWithoutExecuting trains the toy model on 2
// replicas, lazily and as a compiled step, in compile-only mode: every
// program is compiled and saved, nothing executes, and values read as
// zeros. Turned off, the same engine runs exactly the programs a fresh
// engine would compile (same losses, same parameters) without compiling.
func TestCompileOnlyCompilesWithoutExecuting(t *testing.T) {
	for _, compiled := range []bool{false, true} {
		reference, referenceParams := trainToy(t, newEngine(t, 2), 2, 4, compiled)

		eng := newEngine(t, 2)
		eng.SetCompileOnly(true)
		require.True(t, eng.CompileOnly())
		ResetMetrics()
		losses, params := trainToy(t, eng, 2, 4, compiled)
		m := GetMetrics()
		assert.Zero(t, m.Executions, "compiled=%v: nothing executes", compiled)
		assert.Positive(t, m.SkippedExecutions, "compiled=%v", compiled)
		assert.Positive(t, m.Compilations, "compiled=%v: the programs are compiled", compiled)
		for r := range losses {
			assert.Equal(t, []float32{0, 0, 0, 0}, losses[r], "compiled=%v: replica %d reads zeros", compiled, r)
			for _, p := range params[r] {
				assert.Equal(t, make([]float32, len(p)), p, "compiled=%v: parameters read zeros", compiled)
			}
		}
		files, err := filepath.Glob(filepath.Join(os.Getenv(EnvCacheDir), "*.xlaexec"))
		require.NoError(t, err)
		assert.NotEmpty(t, files, "compiled=%v: the programs are in the persistent cache", compiled)

		eng.SetCompileOnly(false)
		ResetMetrics()
		losses, params = trainToy(t, eng, 2, 4, compiled)
		m = GetMetrics()
		assert.Zero(t, m.Compilations, "compiled=%v: the real run compiles nothing", compiled)
		assert.Positive(t, m.Executions, "compiled=%v", compiled)
		assert.Equal(t, reference, losses, "compiled=%v: losses after the compile-only pass", compiled)
		assert.Equal(t, referenceParams, params, "compiled=%v: parameters after the compile-only pass", compiled)
	}
}

// TestCompileOnlyFromEnvironment: XLADDP_COMPILE_ONLY turns the mode on
// for a new engine, and a value that is neither on nor off fails the first
// MarkStep with the variable's name instead of silently running.
func TestCompileOnlyFromEnvironment(t *testing.T) {
	cases := []struct {
		value   string
		on      bool
		wantErr string
	}{
		{value: "1", on: true},
		{value: "true", on: true},
		{value: "0"},
		{value: ""},
		{value: "yes", wantErr: `XLADDP_COMPILE_ONLY="yes": want 1`},
		{value: " 1", wantErr: `XLADDP_COMPILE_ONLY=" 1"`},
	}
	for _, tc := range cases {
		t.Run(tc.value, func(t *testing.T) {
			t.Setenv(EnvCompileOnly, tc.value)
			eng := newEngine(t, 1)
			ctx := testContext(t)
			d := eng.Device(0)
			x := mustFromSlice(t, d, []float32{1, 2}, 2).Add(mustFromSlice(t, d, []float32{3, 4}, 2))
			ResetMetrics()
			err := d.MarkStep(ctx)
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.on, eng.CompileOnly())
			got, err := x.Float32s(ctx)
			require.NoError(t, err)
			if tc.on {
				assert.Equal(t, []float32{0, 0}, got)
				assert.EqualValues(t, 1, GetMetrics().SkippedExecutions)
			} else {
				assert.Equal(t, []float32{4, 6}, got)
				assert.Zero(t, GetMetrics().SkippedExecutions)
			}
		})
	}
}
