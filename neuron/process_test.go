package neuron

import (
	"bytes"
	"log/slog"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/xladdp/xladdp/neuron/trn"
)

// TestJobFromEnv: the launch mode and world each launcher leaves in the
// environment (the worker variables ddprun and torchrun set, ddp.Spawn's
// children, the Neuron tutorial's NEURON_NUM_DEVICES).
func TestJobFromEnv(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		want trn.Job
	}{
		{"ddprun / torchrun worker on 2 nodes",
			map[string]string{"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1", "TORCHELASTIC_RUN_ID": "j"},
			trn.Job{Mode: trn.Run, Rank: 3, WorldSize: 4, LocalRank: 1, LocalWorldSize: 2, LocalDevices: 1, MasterAddr: "10.0.0.1", MultiNode: true}},
		{"ddp.Spawn child",
			map[string]string{"XLADDP_SPAWN_CHILD": "1", "RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"},
			trn.Job{Mode: trn.SpawnProcesses, Rank: 1, WorldSize: 2, LocalRank: 1, LocalWorldSize: 2, LocalDevices: 2, MasterAddr: "127.0.0.1"}},
		{"the tutorial's NEURON_NUM_DEVICES=2, one process",
			map[string]string{"NEURON_NUM_DEVICES": "2"},
			trn.Job{Mode: trn.SpawnOneProcess, WorldSize: 1, LocalWorldSize: 1, LocalDevices: 2}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := JobFromEnv(envOf(c.env))
			require.NoError(t, err)
			assert.Equal(t, c.want, got)
		})
	}
	_, err := JobFromEnv(envOf(map[string]string{"RANK": "x"}))
	assert.ErrorContains(t, err, "$RANK=\"x\"")
}

// TestWithReplicas: a one-process job takes the caller's replica count
// (ddp.Spawn's Devices) as its core count unless the environment names
// one; other modes and a count of 0 leave the job alone.
func TestWithReplicas(t *testing.T) {
	one := trn.Job{Mode: trn.SpawnOneProcess, LocalDevices: 1}
	cases := []struct {
		name     string
		job      trn.Job
		replicas int
		env      map[string]string
		want     int
	}{
		{"replicas fill the count", one, 4, nil, 4},
		{"no replicas", one, 0, nil, 1},
		{"NEURONCORE_NUM_DEVICES wins", trn.Job{Mode: trn.SpawnOneProcess, LocalDevices: 2}, 4, map[string]string{"NEURONCORE_NUM_DEVICES": "2"}, 2},
		{"NEURON_NUM_DEVICES wins", trn.Job{Mode: trn.SpawnOneProcess, LocalDevices: 8}, 4, map[string]string{"NEURON_NUM_DEVICES": "8"}, 8},
		{"run mode ignores it", trn.Job{Mode: trn.Run, LocalDevices: 1}, 4, nil, 1},
		{"spawned processes ignore it", trn.Job{Mode: trn.SpawnProcesses, LocalDevices: 2}, 4, nil, 2},
	}
	for _, tc := range cases {
		assert.Equal(t, tc.want, withReplicas(tc.job, tc.replicas, envOf(tc.env)).LocalDevices, tc.name)
	}
}

// TestValidateMachine: on a known instance type every launch mode's
// layout is checked before the plugin loads; elsewhere nothing is.
func TestValidateMachine(t *testing.T) {
	noDMI := func(string) ([]byte, error) { return nil, os.ErrNotExist }
	dmi := func(name string) func(string) ([]byte, error) {
		return func(string) ([]byte, error) { return []byte(name + "\n"), nil }
	}
	run := func(world, local int) trn.Job {
		return trn.Job{Mode: trn.Run, WorldSize: world, LocalWorldSize: local, LocalDevices: 1}
	}
	cases := []struct {
		name    string
		job     trn.Job
		env     map[string]string
		read    func(string) ([]byte, error)
		wantErr string
	}{
		{"not a Trainium machine", run(64, 3), nil, noDMI, ""},
		{"another EC2 type", run(64, 3), nil, dmi("m5.large"), ""},
		{"2 x trn1.32xlarge, 32 each", run(64, 32), nil, dmi("trn1.32xlarge"), ""},
		{"trn1.2xlarge spawn of 2", trn.Job{Mode: trn.SpawnOneProcess, LocalDevices: 2}, nil, dmi("trn1.2xlarge"), ""},
		{"trn1.2xlarge spawn of 4", trn.Job{Mode: trn.SpawnOneProcess, LocalDevices: 4}, nil, dmi("trn1.2xlarge"),
			"4 NeuronCores per node requested, but trn1.2xlarge has 2"},
		{"trn1.2xlarge on 2 nodes", run(4, 2), nil, dmi("trn1.2xlarge"), "no EFA interface"},
		{"4 per trn1 node", run(4, 4), nil, dmi("trn1.32xlarge"), "a collective group of 4 NeuronCores per node"},
		{"spawned processes, misaligned range", trn.Job{Mode: trn.SpawnProcesses, WorldSize: 2, LocalWorldSize: 2, LocalDevices: 2},
			map[string]string{"NEURON_RT_VISIBLE_CORES": "1-2"}, dmi("trn1.32xlarge"), "starts at core 1, not a multiple of its size 2"},
		{"range past the last core", run(2, 2), map[string]string{"NEURON_RT_VISIBLE_CORES": "32-33"}, dmi("trn1.32xlarge"),
			"names core 33, but trn1.32xlarge has cores 0 to 31"},
		{"override names a type", run(2, 2), map[string]string{trn.EnvInstanceType: "trn1.2xlarge"}, dmi("trn1.32xlarge"), ""},
		{"override names no type", run(2, 2), map[string]string{trn.EnvInstanceType: "trn9.huge"}, noDMI, `"trn9.huge" is not a Trainium instance type`},
		{"2 x trn2.48xlarge, 64 each", run(128, 64), nil, dmi("trn2.48xlarge"), ""},
		{"trn2 at LNC 1: 128 cores", run(128, 128), map[string]string{trn.EnvLogicalNCConfig: "1"}, dmi("trn2.48xlarge"), ""},
		{"trn2 at LNC 2: not 128", run(128, 128), nil, dmi("trn2.48xlarge"), "128 NeuronCores per node requested, but trn2.48xlarge has 64"},
		{"an UltraServer node", run(256, 64), nil, dmi("trn2u.48xlarge"), ""},
		{"LNC 2 on trn1", run(2, 2), map[string]string{trn.EnvLogicalNCConfig: "2"}, dmi("trn1.32xlarge"), "it takes 1 (its only setting)"},
		{"LNC 4 on trn2", run(2, 2), map[string]string{trn.EnvLogicalNCConfig: "4"}, dmi("trn2.48xlarge"), "it takes 1 or 2"},
	}
	for _, tc := range cases {
		_, err := validateMachine(tc.job, envOf(tc.env), tc.read)
		if tc.wantErr == "" {
			assert.NoError(t, err, tc.name)
			continue
		}
		assert.ErrorContains(t, err, tc.wantErr, tc.name)
	}
}

// TestCompileCacheDir: the cache a warning looks at.
func TestCompileCacheDir(t *testing.T) {
	cases := []struct {
		env  map[string]string
		want string
	}{
		{nil, DefaultCompileCache},
		{map[string]string{"NEURON_CC_FLAGS": "-O2 --cache_dir=/local/c"}, "/local/c"},
		{map[string]string{"NEURON_CC_FLAGS": "--cache_dir=/a", "NEURON_COMPILE_CACHE_URL": "/b"}, "/b"},
		{map[string]string{"NEURON_COMPILE_CACHE_URL": "s3://bucket/cache"}, ""},
	}
	for _, tc := range cases {
		assert.Equal(t, tc.want, compileCacheDir(envOf(tc.env)), "%v", tc.env)
	}
}

// TestConfigure sets the compiler's variables, keeping the user's flags,
// and refuses a level neuronx-cc does not have.
func TestConfigure(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("NEURON_CC_FLAGS", "-O1 --model-type=transformer")
	t.Setenv("NEURON_COMPILE_CACHE_URL", "")
	require.NoError(t, Configure(CompileOptions{CacheDir: dir, OptLevel: 2, ModelType: "generic", RetryFailedCompilation: true}))
	assert.Equal(t, "-O1 --model-type=transformer --cache_dir="+dir+" --retry_failed_compilation", os.Getenv("NEURON_CC_FLAGS"))
	assert.Equal(t, dir, os.Getenv("NEURON_COMPILE_CACHE_URL"))
	assert.ErrorContains(t, Configure(CompileOptions{OptLevel: 4}), "-O0 to -O3")
}

// TestApplyEnvironmentLogsWhy: each variable set is logged at debug
// level with the rule that set it; one the user set is left and not
// logged.
func TestApplyEnvironmentLogsWhy(t *testing.T) {
	for k, v := range map[string]string{"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
		"MASTER_ADDR": "10.1.2.3", "TORCHELASTIC_RUN_ID": "j", "NEURON_RT_ROOT_COMM_ID": "10.9.9.9:5", trn.EnvInstanceType: "trn1.32xlarge",
		"NEURON_RT_VISIBLE_CORES": "", "NEURON_PJRT_PROCESS_INDEX": "", "NEURON_PJRT_PROCESSES_NUM_DEVICES": "", "NEURON_PJRT_WORLD_SIZE": "",
		"PJRT_LOCAL_PROCESS_COUNT": "", "PJRT_LOCAL_PROCESS_RANK": "", "FI_PROVIDER": "", "FI_EFA_USE_DEVICE_RDMA": "", "FI_EFA_FORK_SAFE": "",
		"ALLREDUCE_GRADIENTS_BUCKET_SIZE_MB": "", "NEURON_RT_STOCHASTIC_ROUNDING_EN": "", "NEURONCORE_NUM_DEVICES": "", "NEURON_NUM_DEVICES": "", "XLADDP_SPAWN_CHILD": "",
		"NEURON_COMPILE_CACHE_URL": t.TempDir()} {
		t.Setenv(k, v)
	}
	var logs bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	defer slog.SetDefault(prev)
	require.NoError(t, applyEnvironment(0))
	assert.Equal(t, "1", os.Getenv("NEURON_RT_VISIBLE_CORES"))
	assert.Equal(t, "3", os.Getenv("NEURON_PJRT_PROCESS_INDEX"))
	assert.Equal(t, "efa", os.Getenv("FI_PROVIDER"))
	assert.Equal(t, "10.9.9.9:5", os.Getenv("NEURON_RT_ROOT_COMM_ID"), "the user's value stays")
	out := logs.String()
	assert.Contains(t, out, `variable=NEURON_RT_VISIBLE_CORES value=1 mode="run (ddprun/torchrun)" why="this process's NeuronCore`)
	assert.Contains(t, out, "variable=FI_PROVIDER value=efa")
	assert.NotContains(t, out, "variable=NEURON_RT_ROOT_COMM_ID")
	assert.NotContains(t, out, "level=WARN", "a local cache is not warned about")

	t.Setenv("LOCAL_WORLD_SIZE", "4") // 4 per trn1 node cannot form a group
	t.Setenv("NEURON_RT_VISIBLE_CORES", "")
	assert.ErrorContains(t, applyEnvironment(0), "a collective group of 4 NeuronCores per node")
}

// TestLogicalCoreEnvironment: on Trainium2 the runtime's logical
// NeuronCore setting is written out and the compiler told the same,
// unless the user gave the compiler one; nothing on Trainium1.
func TestLogicalCoreEnvironment(t *testing.T) {
	trn2, trn1 := trn.Instances["trn2.48xlarge"], trn.Instances["trn1.32xlarge"]
	assert.Empty(t, logicalCoreEnvironment(trn1, envOf(nil)))
	assert.Equal(t, map[string]string{trn.EnvLogicalNCConfig: "2", trn.EnvCCFlags: "-O1 --logical-nc-config=2"},
		logicalCoreEnvironment(trn2, envOf(map[string]string{trn.EnvCCFlags: "-O1"})))
	lnc1, err := trn2.WithLNC(1)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{trn.EnvCCFlags: "--logical-nc-config=1"},
		logicalCoreEnvironment(lnc1, envOf(map[string]string{trn.EnvLogicalNCConfig: "1"})))
	assert.Equal(t, map[string]string{trn.EnvLogicalNCConfig: "2"},
		logicalCoreEnvironment(trn2, envOf(map[string]string{trn.EnvCCFlags: "-lnc=2 -O2"})), "the user's compiler setting is kept")
}
