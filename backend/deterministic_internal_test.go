package backend

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFileContainsFindsANeedleAcrossChunks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "plugin.so")
	data := make([]byte, 3<<20)
	at := 1<<20 - 5 // straddles the first 1 MiB read
	copy(data[at:], ynnFusionFlag)
	require.NoError(t, os.WriteFile(path, data, 0o644))
	found, err := fileContains(path, []byte(ynnFusionFlag))
	require.NoError(t, err)
	assert.True(t, found)
	found, err = fileContains(path, []byte("xla_cpu_not_a_flag"))
	require.NoError(t, err)
	assert.False(t, found)
	_, err = fileContains(filepath.Join(t.TempDir(), "missing.so"), []byte("x"))
	assert.Error(t, err)
}

func TestKeepCPUReductionsInXLA(t *testing.T) {
	plugin := filepath.Join(t.TempDir(), "plugin.so")
	require.NoError(t, os.WriteFile(plugin, []byte("...\x00"+ynnFusionFlag+"\x00..."), 0o644))
	for _, tc := range []struct{ flags, want, err string }{
		{"", "--" + ynnFusionFlag + "=" + ynnFusionValue, ""},
		{"--xla_dump_to=/tmp/d", "--xla_dump_to=/tmp/d --" + ynnFusionFlag + "=" + ynnFusionValue, ""},
		{"--" + ynnFusionFlag + "=dot", "--" + ynnFusionFlag + "=dot", ""},
		{"--" + ynnFusionFlag + "=dot,reduce", "", "without reduce"},
	} {
		t.Setenv(EnvXLAFlags, tc.flags)
		err := keepCPUReductionsInXLA(plugin)
		if tc.err != "" {
			assert.ErrorContains(t, err, tc.err, tc.flags)
			continue
		}
		require.NoError(t, err, tc.flags)
		assert.Equal(t, tc.want, os.Getenv(EnvXLAFlags))
	}
	// A plugin that does not know the flag gets none: XLA would abort.
	older := filepath.Join(t.TempDir(), "older.so")
	require.NoError(t, os.WriteFile(older, []byte("no such flag"), 0o644))
	t.Setenv(EnvXLAFlags, "")
	require.NoError(t, keepCPUReductionsInXLA(older))
	assert.Empty(t, os.Getenv(EnvXLAFlags))
}

func TestDeterministicOption(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want bool
		err  bool
	}{{"", false, false}, {"0", false, false}, {"1", true, false}, {"yes", false, true}} {
		t.Setenv(EnvDeterministic, tc.env)
		got, err := deterministicOption(Options{})
		assert.Equal(t, tc.err, err != nil, tc.env)
		assert.Equal(t, tc.want, got, tc.env)
	}
	t.Setenv(EnvDeterministic, "")
	got, err := deterministicOption(Options{Deterministic: true})
	require.NoError(t, err)
	assert.True(t, got)
}

// TestDeterministicAfterAFastBackendIsRefused: XLA reads its flags once a
// process, so a deterministic backend after a process's first CPU backend
// opened without it fails, saying why; a process that starts
// deterministic says so on every backend (a child process each, this
// test binary having opened fast ones).
func TestDeterministicAfterAFastBackendIsRefused(t *testing.T) {
	if order := os.Getenv("XLADDP_TEST_CHILD"); order != "" {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var last error
		for _, det := range strings.Split(order, ",") {
			b, err := Open(ctx, Options{Target: CPU, Deterministic: det == "det"})
			if err == nil {
				if b.Deterministic() != strings.HasPrefix(order, "det") {
					os.Exit(5)
				}
				err = b.Close()
			}
			last = err
		}
		if last != nil {
			os.Stderr.WriteString(last.Error())
			os.Exit(3)
		}
		os.Exit(0)
	}
	for _, tc := range []struct {
		order, says string
	}{
		{"fast,det", "whose first backend was opened without it"},
		{"det,fast", ""},
		{"det,det", ""},
	} {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestDeterministicAfterAFastBackendIsRefused$")
		cmd.Env = append(os.Environ(), "XLADDP_TEST_CHILD="+tc.order, EnvXLAFlags+"=", EnvDeterministic+"=")
		out, err := cmd.CombinedOutput()
		if tc.says == "" {
			assert.NoError(t, err, "%s: %s", tc.order, out)
			continue
		}
		assert.Error(t, err, tc.order)
		assert.Contains(t, string(out), tc.says, tc.order)
	}
}

func TestAddXLAFlagRefusesTheUsersOtherValue(t *testing.T) {
	plugin := filepath.Join(t.TempDir(), "gpu.so")
	require.NoError(t, os.WriteFile(plugin, []byte("\x00"+gpuDeterministicFlag+"\x00"), 0o644))
	t.Setenv(EnvXLAFlags, "")
	require.NoError(t, addXLAFlag(plugin, gpuDeterministicFlag, "true"))
	assert.Equal(t, "--"+gpuDeterministicFlag+"=true", os.Getenv(EnvXLAFlags))
	require.NoError(t, addXLAFlag(plugin, gpuDeterministicFlag, "true"), "set already")
	t.Setenv(EnvXLAFlags, "--"+gpuDeterministicFlag+"=false")
	assert.ErrorContains(t, addXLAFlag(plugin, gpuDeterministicFlag, "true"), "deterministic programs need true")
}

func TestDeterministicCPUDevicesCoverTheMachine(t *testing.T) {
	n := machineCPUs()
	assert.GreaterOrEqual(t, n, runtime.NumCPU(), "affinity never counts more CPUs than the machine has")
	assert.Equal(t, max(4, n), DeterministicCPUDevices())
}
