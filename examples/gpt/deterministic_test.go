package main

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/xladdp/xladdp/examples/internal/exampletest"
)

// deterministic is a tiny GPT with dropout, AdamW's two groups and
// clipping, --deterministic at a global batch of 32 in micro-shards of 8.
func deterministic(t *testing.T, steps, precision string) []string {
	return append([]string{"--deterministic", "--micro-shard", "8", "--dropout", "0.1", "--steps", steps, "--eval-interval", steps,
		"--sample", "0", "--precision", precision, "--data", corpusOrSkip(t)}, tiny...)
}

// TestLongDeterministicAcceptance: 200 steps in fp32 and in bf16, the
// same weights on one process, 2, 3 and 4 spawned replicas, 2, 3 and 4
// ddprun processes, 2 processes × 2 local replicas, two network-namespace
// hosts, and with ZeRO (make test's ddp and mnist tests cover the
// machinery in less time).
func TestLongDeterministicAcceptance(t *testing.T) {
	exampletest.CleanEnv(t)
	for _, precision := range []string{"fp32", "bf16"} {
		t.Run(precision, func(t *testing.T) {
			exampletest.SameWeightsEverywhere(t, "gpt", deterministic(t, "200", precision), []exampletest.Layout{
				exampletest.Spawned(1), exampletest.Spawned(2), exampletest.Spawned(3), exampletest.Spawned(4),
				exampletest.Ranks(2), exampletest.Ranks(3), exampletest.Ranks(4),
				{Name: "ddprun 2 × spawn 2", Launch: []string{"--nproc_per_node=2"}, Args: []string{"--spawn", "--cpu-devices", "2"}},
				exampletest.Ranks(3, "--zero"), exampletest.Spawned(4, "--zero"), exampletest.NamespaceHostsLayout(2),
			})
		})
	}
}

// TestLongNoStepLostWithZeRO: the tiny GPT (dropout, AdamW, clipping),
// --deterministic with its AdamW state and master weights sharded over
// three nodes (--zero) under ddprun --nnodes=2:3; in each trial one node
// other than the store's is killed (kill -9 of its ddprun and worker) at
// a random moment: the survivors hold the lost node's shards (its
// buddy's copies), commit the last step any of them completed, and the
// job resumes there (0 steps redone) and ends with the uninterrupted
// run's weights.
func TestLongNoStepLostWithZeRO(t *testing.T) {
	exampletest.CleanEnv(t)
	args := append(deterministic(t, "60", "fp32"), "--zero", "--checkpoint-every", "1000", "--log-interval", "1")
	want := exampletest.WeightsDigest(t, exampletest.Spawned(1).Run(t, "gpt", deterministic(t, "60", "fp32")...))
	for trial := range 3 {
		t.Run(fmt.Sprintf("trial %d", trial+1), func(t *testing.T) {
			out := exampletest.LoseANode(t, "gpt", args, 3, exampletest.Marks("step %d/60", 10, 20, 30, 40, 50))
			assert.Contains(t, out, "assembled from the shards the survivors of a lost peer held")
			assert.Equal(t, want, exampletest.WeightsDigest(t, out), "the job that lost a node trained other weights")
		})
	}
}

// TestLongNoStepLostWhenANodeJoinsWithZeRO: the tiny GPT, --deterministic
// with --zero, under ddprun --nnodes=2:3 gains a third node at a random
// moment: the job's workers commit the step they all completed as a
// sharded checkpoint and go on in the same processes with the new node,
// which reads it (its shards split again at three replicas); and with a
// node of the job lost while the new one enters. Every trial redoes no
// completed step and ends with the uninterrupted run's weights.
func TestLongNoStepLostWhenANodeJoinsWithZeRO(t *testing.T) {
	exampletest.CleanEnv(t)
	args := append(deterministic(t, "60", "fp32"), "--zero", "--checkpoint-every", "1000", "--log-interval", "1")
	want := exampletest.WeightsDigest(t, exampletest.Spawned(1).Run(t, "gpt", deterministic(t, "60", "fp32")...))
	marks := exampletest.Marks("step %d/60", 10, 20, 30)
	t.Run("a node joins", func(t *testing.T) {
		out := exampletest.JoinANode(t, "gpt", args, 3, marks)
		assert.Equal(t, want, exampletest.WeightsDigest(t, out), "the job that grew trained other weights")
	})
	t.Run("a node lost while another joins", func(t *testing.T) {
		out := exampletest.JoinANodeAndLoseOne(t, "gpt", args, 3, marks)
		assert.Equal(t, want, exampletest.WeightsDigest(t, out), "the job trained other weights")
	})
}
