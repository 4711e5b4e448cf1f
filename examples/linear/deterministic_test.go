package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/examples/internal/exampletest"
)

// TestDeterministicSameWeightsInEveryLaunch: --deterministic trains the
// linear model to the same bits on one replica, 4 spawned replicas (6
// micro-shards of 5 over 4: two take one more), 3 processes under
// ddprun, 2 under mpirun and 2 processes × 2 local replicas; each
// micro-shard is a batch of 5 in the seed's size lines.
func TestDeterministicSameWeightsInEveryLaunch(t *testing.T) {
	exampletest.CleanEnv(t)
	args := []string{"--deterministic", "--epochs", "3", "--micro-shard", "5"}
	exampletest.SameWeightsEverywhere(t, "linear", args, []exampletest.Layout{
		exampletest.Spawned(1), exampletest.Spawned(4), exampletest.Ranks(3),
		{Name: "mpirun 2", Mpirun: []string{exampletest.Mpirun(t), "--allow-run-as-root", "--oversubscribe", "-np", "2"}},
		{Name: "ddprun 2 × spawn 2", Launch: []string{"--nproc_per_node=2"}, Args: []string{"--spawn", "--cpu-devices", "2"}},
	})
	out := exampletest.Spawned(2).Run(t, "linear", args...)
	assert.Contains(t, out, "rank 1: In Model: input size [5 5] output size [5 2]")
	assert.Contains(t, out, "mean loss")
	require.Contains(t, out, "on the global batches' 90 samples", "3 global batches of 30 an epoch")
}
