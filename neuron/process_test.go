package neuron

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestJobFromEnv: the launch mode and world each launcher leaves in the
// environment (the worker variables ddprun and torchrun set, ddp.Spawn's
// children, the Neuron tutorial's NEURON_NUM_DEVICES).
func TestJobFromEnv(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		want Job
	}{
		{"ddprun / torchrun worker on 2 nodes",
			map[string]string{"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1", "TORCHELASTIC_RUN_ID": "j"},
			Job{Mode: Run, Rank: 3, WorldSize: 4, LocalRank: 1, LocalWorldSize: 2, LocalDevices: 1, MasterAddr: "10.0.0.1", MultiNode: true}},
		{"ddp.Spawn child",
			map[string]string{"XLADDP_SPAWN_CHILD": "1", "RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"},
			Job{Mode: SpawnProcesses, Rank: 1, WorldSize: 2, LocalRank: 1, LocalWorldSize: 2, LocalDevices: 2, MasterAddr: "127.0.0.1"}},
		{"the tutorial's NEURON_NUM_DEVICES=2, one process",
			map[string]string{"NEURON_NUM_DEVICES": "2"},
			Job{Mode: SpawnOneProcess, WorldSize: 1, LocalWorldSize: 1, LocalDevices: 2}},
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
	one := Job{Mode: SpawnOneProcess, LocalDevices: 1}
	cases := []struct {
		name     string
		job      Job
		replicas int
		env      map[string]string
		want     int
	}{
		{"replicas fill the count", one, 4, nil, 4},
		{"no replicas", one, 0, nil, 1},
		{"NEURONCORE_NUM_DEVICES wins", Job{Mode: SpawnOneProcess, LocalDevices: 2}, 4, map[string]string{"NEURONCORE_NUM_DEVICES": "2"}, 2},
		{"NEURON_NUM_DEVICES wins", Job{Mode: SpawnOneProcess, LocalDevices: 8}, 4, map[string]string{"NEURON_NUM_DEVICES": "8"}, 8},
		{"run mode ignores it", Job{Mode: Run, LocalDevices: 1}, 4, nil, 1},
		{"spawned processes ignore it", Job{Mode: SpawnProcesses, LocalDevices: 2}, 4, nil, 2},
	}
	for _, tc := range cases {
		assert.Equal(t, tc.want, withReplicas(tc.job, tc.replicas, envOf(tc.env)).LocalDevices, tc.name)
	}
}
