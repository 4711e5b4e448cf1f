package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/xladdp/xladdp/examples/internal/exampletest"
)

// TestLongDeterministicSameWeightsAndStatistics: fine-tuning (random
// resized crops and flips, SGD with momentum, StepLR, BatchNorm) with
// --deterministic at a global batch of 8 in micro-shards of 2: the same
// parameters and BatchNorm statistics, bit for bit, on one replica, 3
// spawned replicas (4 micro-shards over 3: padding), 2 processes under
// ddprun and 2 processes × 2 local replicas, over two epochs.
func TestLongDeterministicSameWeightsAndStatistics(t *testing.T) {
	exampletest.CleanEnv(t)
	dir := t.TempDir()
	exampletest.ImageFolder(t, dir, 24)
	args := []string{"--data", dir, "--image-size", "32", "--lr", "0.01", "--epochs", "2", "--step-size", "1", "--log-interval", "2",
		"--deterministic", "--batch-size", "8", "--micro-shard", "2"}
	exampletest.SameWeightsEverywhere(t, "finetune", args, []exampletest.Layout{
		exampletest.Spawned(1), exampletest.Spawned(3), exampletest.Ranks(2),
		{Name: "ddprun 2 × spawn 2", Launch: []string{"--nproc_per_node=2"}, Args: []string{"--spawn", "--cpu-devices", "2"}},
	})
	out := exampletest.Spawned(2).Run(t, "finetune", args...)
	assert.Contains(t, out, "deterministic: global batch 8 in micro-shards of 2, 2 a step on this replica")
}
