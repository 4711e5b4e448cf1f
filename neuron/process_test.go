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
