package backend

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseTarget(t *testing.T) {
	tests := []struct {
		in   string
		want Target
	}{
		{"cpu", CPU}, {"CPU", CPU}, {" cpu ", CPU},
		{"cuda", CUDA}, {"CUDA", CUDA}, {"GPU", CUDA}, {"gpu", CUDA},
	}
	for _, tt := range tests {
		got, err := ParseTarget(tt.in)
		require.NoError(t, err, tt.in)
		assert.Equal(t, tt.want, got, tt.in)
	}
	_, err := ParseTarget("tpu")
	assert.ErrorIs(t, err, ErrUnknownTarget)
	assert.ErrorContains(t, err, `"tpu": this program knows cpu, cuda, gpu (cuda)`)
}

func TestResolveTarget(t *testing.T) {
	tests := []struct {
		name       string
		explicit   Target
		xladdpEnv  string
		pjrtEnv    string
		want       Target
		wantErrMsg string
	}{
		{"default is cpu", "", "", "", CPU, ""},
		{"torch-xla PJRT_DEVICE", "", "", "GPU", CUDA, ""},
		{"XLADDP_DEVICE beats PJRT_DEVICE", "", "gpu", "CPU", CUDA, ""},
		{"explicit beats env", CPU, "cuda", "CUDA", CPU, ""},
		{"bad XLADDP_DEVICE names the variable", "", "tpu", "", "", "$XLADDP_DEVICE: unknown device target"},
		{"bad PJRT_DEVICE names the variable", "", "", "TPU", "", "$PJRT_DEVICE: unknown device target"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearTargetEnv(t)
			t.Setenv(EnvDevice, tt.xladdpEnv)
			t.Setenv(EnvPJRTDevice, tt.pjrtEnv)
			got, err := ResolveTarget(tt.explicit)
			checkResult(t, got, err, tt.want, ErrUnknownTarget, tt.wantErrMsg)
		})
	}
}

func TestCPUDeviceCount(t *testing.T) {
	tests := []struct {
		name       string
		opts       Options
		xladdpEnv  string
		torchEnv   string
		want       int
		wantErrMsg string
	}{
		{"default is one", Options{}, "", "", 1, ""},
		{"replicas set the default", Options{Replicas: 3}, "", "", 3, ""},
		{"torch-xla CPU_NUM_DEVICES", Options{Replicas: 3}, "", "2", 2, ""},
		{"XLADDP_CPU_DEVICES beats CPU_NUM_DEVICES", Options{}, "5", "2", 5, ""},
		{"option beats env", Options{CPUDevices: 8}, "5", "2", 8, ""},
		{"maximum", Options{CPUDevices: MaxCPUDevices}, "", "", MaxCPUDevices, ""},
		{"negative option", Options{CPUDevices: -1}, "", "", 0, "Options.CPUDevices=-1: the CPU device count must be from 1 to 1024"},
		{"too many", Options{CPUDevices: MaxCPUDevices + 1}, "", "", 0, "Options.CPUDevices=1025"},
		{"zero in env", Options{}, "0", "", 0, "$XLADDP_CPU_DEVICES=0"},
		{"not a number", Options{}, "", "four", 0, `$CPU_NUM_DEVICES="four" is not an integer`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearTargetEnv(t)
			t.Setenv(EnvCPUDevices, tt.xladdpEnv)
			t.Setenv(EnvTorchXLACPUDevices, tt.torchEnv)
			got, err := cpuDeviceCount(tt.opts)
			checkResult(t, got, err, tt.want, ErrBadDeviceCount, tt.wantErrMsg)
		})
	}
}

func TestCPUExecution(t *testing.T) {
	tests := []struct {
		name       string
		opts       Options
		env        string
		want       CPUExecution
		wantErrMsg string
	}{
		{"default is sync", Options{}, "", CPUSync, ""},
		{"env async", Options{}, "async", CPUAsync, ""},
		{"env sync, spaces trimmed", Options{}, " sync ", CPUSync, ""},
		{"option beats env", Options{CPUExecution: CPUAsync}, "sync", CPUAsync, ""},
		{"env case matters", Options{}, "ASYNC", "", `$XLADDP_CPU_EXECUTION="ASYNC": use "sync" or "async"`},
		{"env boolean", Options{}, "1", "", `$XLADDP_CPU_EXECUTION="1"`},
		{"bad option", Options{CPUExecution: "later"}, "", "", `Options.CPUExecution="later"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearTargetEnv(t)
			t.Setenv(EnvCPUExecution, tt.env)
			got, err := cpuExecution(tt.opts)
			checkResult(t, got, err, tt.want, ErrBadOption, tt.wantErrMsg)
		})
	}
}

func mustSpec(t *testing.T, target Target) TargetSpec {
	t.Helper()
	spec, err := lookupTarget(target)
	require.NoError(t, err)
	return spec
}

// A target registered whole is parsed by its aliases, and its preflight
// and device count are what the launchers and xladevices read.
func TestRegisterTarget(t *testing.T) {
	const fake Target = "registertest"
	RegisterTarget(TargetSpec{
		Target:        fake,
		Aliases:       []string{"RegTest"},
		ClientOptions: func(Options) (map[string]any, error) { return nil, nil },
		Preflight:     func() []string { return []string{"no device: plug one in"} },
		DeviceCount: func(getenv func(string) string) (int, bool, error) {
			return 3, getenv("REGTEST_DEVICES") != "", nil
		},
	})
	for _, name := range []string{"registertest", "regtest", " REGTEST "} {
		got, err := ParseTarget(name)
		require.NoError(t, err, name)
		assert.Equal(t, fake, got)
	}
	assert.Contains(t, Targets(), fake)
	assert.Equal(t, []string{"no device: plug one in"}, Preflight(fake))
	assert.Nil(t, Preflight(CPU), "cpu has no preflight")
	n, ok, err := LocalDeviceCount(func(k string) string { return map[string]string{"REGTEST_DEVICES": "3"}[k] })
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, 3, n)
	_, ok, err = LocalDeviceCount(func(string) string { return "" })
	assert.NoError(t, err)
	assert.False(t, ok, "no target's variables are set")

	assert.PanicsWithValue(t, `backend: target name "regtest" registered twice`, func() {
		RegisterTarget(TargetSpec{Target: "other", Aliases: []string{"regtest"},
			ClientOptions: func(Options) (map[string]any, error) { return nil, nil }})
	})
	_, err = ParseTarget("other")
	assert.ErrorIs(t, err, ErrUnknownTarget, "a refused registration leaves nothing behind")
	assert.Panics(t, func() { RegisterTarget(TargetSpec{Target: "noclient"}) })
}

// checkResult: with wantErrMsg, err is sentinel and says it; without,
// got is want.
func checkResult[T any](t *testing.T, got T, err error, want T, sentinel error, wantErrMsg string) {
	t.Helper()
	if wantErrMsg != "" {
		assert.ErrorIs(t, err, sentinel)
		assert.ErrorContains(t, err, wantErrMsg)
		return
	}
	require.NoError(t, err)
	assert.Equal(t, want, got)
}
