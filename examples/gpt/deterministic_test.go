package main

import (
	"testing"

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
