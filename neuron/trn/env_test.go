package trn

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func envOf(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }

// TestEnvironmentMatchesTorchXLA: the golden table is what torch-xla's
// torch_xla/_internal/neuron.py sets for the same job
// (configure_pjrt_environment under torchrun, num_local_processes and
// initialize_env under xmp.spawn) and neuron_utils.py's
// remap_visible_cores, plus torch-neuronx's EFA defaults for multi-node.
func TestEnvironmentMatchesTorchXLA(t *testing.T) {
	cases := []struct {
		name string
		job  Job
		user map[string]string
		want map[string]string
	}{
		{"torchrun, rank 3 of 4 on 2 nodes (SDK list form)",
			Job{Mode: Run, Rank: 3, WorldSize: 4, LocalRank: 1, LocalWorldSize: 2, MasterAddr: "10.0.0.1", MultiNode: true},
			nil,
			map[string]string{"NEURON_RT_ROOT_COMM_ID": "10.0.0.1:62182", "ALLREDUCE_GRADIENTS_BUCKET_SIZE_MB": "50", "NEURON_RT_STOCHASTIC_ROUNDING_EN": "1",
				"NEURON_PJRT_PROCESSES_NUM_DEVICES": "1,1,1,1", "PJRT_LOCAL_PROCESS_COUNT": "2", "NEURON_RT_VISIBLE_CORES": "1",
				"NEURON_PJRT_PROCESS_INDEX": "3", "PJRT_LOCAL_PROCESS_RANK": "1",
				"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "FI_EFA_FORK_SAFE": "1"}},
		{"torchrun, SDK with NEURON_PJRT_WORLD_SIZE",
			Job{Mode: Run, Rank: 0, WorldSize: 64, LocalRank: 0, LocalWorldSize: 32, MasterAddr: "node0", WorldSizeVariable: true},
			nil,
			map[string]string{"NEURON_RT_ROOT_COMM_ID": "node0:62182", "ALLREDUCE_GRADIENTS_BUCKET_SIZE_MB": "50", "NEURON_RT_STOCHASTIC_ROUNDING_EN": "1",
				"NEURON_PJRT_WORLD_SIZE": "64", "PJRT_LOCAL_PROCESS_COUNT": "32", "NEURON_RT_VISIBLE_CORES": "0",
				"NEURON_PJRT_PROCESS_INDEX": "0", "PJRT_LOCAL_PROCESS_RANK": "0"}},
		{"torchrun, IPv6 master, user's core range split per local rank",
			Job{Mode: Run, Rank: 2, WorldSize: 4, LocalRank: 2, LocalWorldSize: 4, MasterAddr: "fd00::1"},
			map[string]string{"NEURON_RT_VISIBLE_CORES": "4-7"},
			map[string]string{"NEURON_RT_ROOT_COMM_ID": "[fd00::1]:62182", "ALLREDUCE_GRADIENTS_BUCKET_SIZE_MB": "50", "NEURON_RT_STOCHASTIC_ROUNDING_EN": "1",
				"NEURON_PJRT_PROCESSES_NUM_DEVICES": "1,1,1,1", "PJRT_LOCAL_PROCESS_COUNT": "4", "NEURON_RT_VISIBLE_CORES": "6",
				"NEURON_PJRT_PROCESS_INDEX": "2", "PJRT_LOCAL_PROCESS_RANK": "2"}},
		{"torchrun, the user's settings stay",
			Job{Mode: Run, Rank: 1, WorldSize: 2, LocalRank: 1, LocalWorldSize: 2, MultiNode: true},
			map[string]string{"NEURON_RT_ROOT_COMM_ID": "custom:1", "NEURON_PJRT_WORLD_SIZE": "2", "FI_PROVIDER": "tcp",
				"ALLREDUCE_GRADIENTS_BUCKET_SIZE_MB": "25", "NEURON_RT_STOCHASTIC_ROUNDING_EN": "0"},
			map[string]string{"NEURON_RT_VISIBLE_CORES": "1", "NEURON_PJRT_PROCESS_INDEX": "1", "PJRT_LOCAL_PROCESS_RANK": "1",
				"FI_EFA_USE_DEVICE_RDMA": "1", "FI_EFA_FORK_SAFE": "1"}},
		{"xmp.spawn, process 1 of 2 (NEURON_NUM_DEVICES=2)",
			Job{Mode: SpawnProcesses, LocalRank: 1, LocalWorldSize: 2, LocalDevices: 2},
			nil,
			map[string]string{"NEURON_RT_ROOT_COMM_ID": "localhost:62182", "ALLREDUCE_GRADIENTS_BUCKET_SIZE_MB": "50", "NEURON_RT_STOCHASTIC_ROUNDING_EN": "1",
				"NEURONCORE_NUM_DEVICES": "2", "NEURON_PJRT_PROCESSES_NUM_DEVICES": "1,1", "NEURON_PJRT_PROCESS_INDEX": "1",
				"NEURON_RT_VISIBLE_CORES": "1"}},
		{"one process drives both cores",
			Job{Mode: SpawnOneProcess, LocalDevices: 2},
			nil,
			map[string]string{"NEURON_RT_ROOT_COMM_ID": "localhost:62182", "ALLREDUCE_GRADIENTS_BUCKET_SIZE_MB": "50", "NEURON_RT_STOCHASTIC_ROUNDING_EN": "1",
				"NEURONCORE_NUM_DEVICES": "2", "NEURON_PJRT_PROCESSES_NUM_DEVICES": "2", "NEURON_PJRT_PROCESS_INDEX": "0"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Environment(c.job, envOf(c.user))
			require.NoError(t, err)
			assert.Equal(t, c.want, got)
		})
	}
}

// TestEnvironmentRefusesBadCores: torch-xla's remap_visible_cores errors.
func TestEnvironmentRefusesBadCores(t *testing.T) {
	cases := []struct {
		cores, want string
		lr, lws     int
	}{
		{"0-3", "names 4 cores for 2 local processes", 0, 2},
		{"0-1,1-2", "names core 1 twice", 0, 4},
		{"a", "is not a core or a range", 0, 1},
		{"3-1", "is not a core or a range", 0, 1},
		{"0-", "is not a core or a range", 0, 1},
	}
	for _, c := range cases {
		_, err := Environment(Job{Mode: Run, LocalRank: c.lr, LocalWorldSize: c.lws, WorldSize: c.lws}, envOf(map[string]string{"NEURON_RT_VISIBLE_CORES": c.cores}))
		assert.ErrorContains(t, err, c.want, c.cores)
	}
	env, err := Environment(Job{Mode: Run, LocalWorldSize: 1, WorldSize: 1}, envOf(map[string]string{"NEURON_RT_VISIBLE_CORES": "5"}))
	require.NoError(t, err)
	assert.Equal(t, "5", env["NEURON_RT_VISIBLE_CORES"], "a single-core workload keeps its core")
	_, err = Environment(Job{Mode: 9}, envOf(nil))
	assert.ErrorContains(t, err, "unknown launch mode")
}
