package ddp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/internal/workerenv"
	"github.com/xladdp/xladdp/neuron"
	_ "github.com/xladdp/xladdp/neuron" // the neuron target's bootstrap
	"github.com/xladdp/xladdp/neuron/neurontest"
)

// spawnNeuronKeys are the variables torch-xla's xmp.spawn sets for a
// Neuron worker (torch_xla/_internal/neuron.py: num_local_processes,
// initialize_env).
var spawnNeuronKeys = []string{"NEURONCORE_NUM_DEVICES", "NEURON_PJRT_PROCESSES_NUM_DEVICES", "NEURON_PJRT_PROCESS_INDEX",
	"NEURON_RT_VISIBLE_CORES", "NEURON_RT_ROOT_COMM_ID", "ALLREDUCE_GRADIENTS_BUCKET_SIZE_MB"}

// spawnNeuron records the Neuron variables its process was given next to
// spawnTrain's line.
func spawnNeuron(ctx context.Context, w ddp.Worker) error {
	env := map[string]string{}
	for _, k := range spawnNeuronKeys {
		env[k] = os.Getenv(k)
	}
	js, err := json.Marshal(env)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(os.Getenv("XLADDP_TEST_DIR"), fmt.Sprintf("env%d", w.Rank)), js, 0o600); err != nil {
		return err
	}
	return spawnTrain(ctx, w)
}

func init() {
	if os.Getenv(spawnScenarioEnv) == "neuron" && os.Getenv(workerenv.SpawnChild) == "1" {
		_ = ddp.Spawn(context.Background(), spawnNeuron, ddp.SpawnOptions{Device: backend.Options{Target: neuron.Target}, ExitChild: true})
	}
}

// TestSpawnOnNeuron runs Spawn on the neuron target (the CPU plugin named
// by a stand-in libneuronxla, loaded through the embedded interpreter) in
// both of xmp.spawn's shapes, 2 cores: each process gets the variables
// torch-xla would set for it, a NEURON_RT_VISIBLE_CORES range the user
// gave is split one core per process, and the training ends where the cpu
// target's does.
func TestSpawnOnNeuron(t *testing.T) {
	cpuDir := t.TempDir()
	t.Setenv("XLADDP_TEST_DIR", cpuDir)
	t.Setenv(spawnScenarioEnv, "train")
	require.NoError(t, ddp.Spawn(t.Context(), spawnTrain, ddp.SpawnOptions{Devices: 2, Device: backend.Options{Target: backend.CPU}}))
	wantHash := strings.Fields(readSpawned(t, cpuDir, 2)[0])[3]

	for _, kv := range neurontest.StandInForCPU(t, t.TempDir(), "") {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	for _, k := range append(spawnNeuronKeys, "NEURON_NUM_DEVICES") {
		t.Setenv(k, "") // restored after the test: the one-process case sets them here
	}
	t.Setenv(spawnScenarioEnv, "neuron")
	cases := []struct {
		name       string
		processes  bool
		userCores  string
		wantCores  []string
		wantCounts string
		wantIndex  []string
	}{
		// xmp.spawn under PJRT: one process per core, NEURONCORE_NUM_DEVICES
		// of them, each seeing one core.
		{name: "processes", processes: true, wantCores: []string{"0", "1"}, wantCounts: "1,1", wantIndex: []string{"0", "1"}},
		{name: "processes-user-range", processes: true, userCores: "4-5", wantCores: []string{"4", "5"}, wantCounts: "1,1",
			wantIndex: []string{"0", "1"}},
		// One process drives both cores.
		{name: "one-process", wantCores: []string{"", ""}, wantCounts: "2", wantIndex: []string{"0", "0"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Setenv("XLADDP_TEST_DIR", dir)
			t.Setenv("NEURON_RT_VISIBLE_CORES", tc.userCores)
			err := ddp.Spawn(t.Context(), spawnNeuron, ddp.SpawnOptions{Devices: 2, Processes: tc.processes,
				Device: backend.Options{Target: neuron.Target}, Command: []string{os.Args[0], "-test.run=^$"}})
			require.NoError(t, err)
			for r, line := range readSpawned(t, dir, 2) {
				assert.Equal(t, wantHash, strings.Fields(line)[3], "rank %d trained differently from the cpu target", r)
				js, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("env%d", r)))
				require.NoError(t, err)
				var env map[string]string
				require.NoError(t, json.Unmarshal(js, &env))
				want := map[string]string{
					"NEURONCORE_NUM_DEVICES":             "2",
					"NEURON_PJRT_PROCESSES_NUM_DEVICES":  tc.wantCounts,
					"NEURON_PJRT_PROCESS_INDEX":          tc.wantIndex[r],
					"NEURON_RT_VISIBLE_CORES":            cmpOrEmpty(tc.userCores, tc.processes, tc.wantCores[r]),
					"ALLREDUCE_GRADIENTS_BUCKET_SIZE_MB": "50",
				}
				if tc.processes {
					want["NEURON_RT_ROOT_COMM_ID"] = "127.0.0.1:62182" // Spawn's MASTER_ADDR
				} else {
					want["NEURON_RT_ROOT_COMM_ID"] = "localhost:62182" // torch-xla's default
				}
				assert.Equal(t, want, env, "rank %d", r)
			}
		})
	}
}

// cmpOrEmpty is the NEURON_RT_VISIBLE_CORES a worker sees: its own core
// when processes split the cores, else what the user set (nothing).
func cmpOrEmpty(user string, processes bool, core string) string {
	if processes {
		return core
	}
	return user
}
