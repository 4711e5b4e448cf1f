package main

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/xladdp/xladdp/examples/internal/exampletest"
)

// TestDeterministicSameWeightsInEveryLaunch: --deterministic trains the
// same weights, bit for bit, on one replica, 4 spawned replicas (two of
// them computing a padding micro-shard: 6 micro-shards over 4) and 3
// processes with ZeRO.
func TestDeterministicSameWeightsInEveryLaunch(t *testing.T) {
	exampletest.CleanEnv(t)
	args := []string{"--deterministic", "--batch-size", "48", "--micro-shard", "8", "--max-steps", "6", "--test-batch-size", "100",
		"--log-interval", "3", "--data", exampletest.MNISTSubset(t, 480, 100)}
	exampletest.SameWeightsEverywhere(t, "mnist", args, []exampletest.Layout{
		exampletest.Spawned(1), exampletest.Spawned(4), exampletest.Ranks(3, "--zero"),
	})
}

// acceptance is issue 46's MNIST run: 200 steps of the seed's job at a
// global batch of 64 in micro-shards of 16.
func acceptance(t *testing.T) []string {
	return []string{"--deterministic", "--batch-size", "64", "--micro-shard", "16", "--max-steps", "200", "--test-batch-size", "100",
		"--log-interval", "20", "--data", exampletest.MNISTSubset(t, 12800, 100)}
}

// TestLongDeterministicAcceptance: the seed's job (dropout, Adadelta,
// StepLR), 200 steps at a global batch of 64: the same weights on one
// process, 2, 3 and 4 spawned replicas, 2, 3 and 4 ddprun processes, 2
// processes × 2 local replicas, two network-namespace hosts, and with
// ZeRO; then a job SIGTERMed at
// world 4 and resumed at world 3 and one that loses a node end with them
// too (one that gains a node: TestLongNoStepLostWhenANodeJoins).
func TestLongDeterministicAcceptance(t *testing.T) {
	exampletest.CleanEnv(t)
	args := acceptance(t)
	want := exampletest.SameWeightsEverywhere(t, "mnist", args, []exampletest.Layout{
		exampletest.Spawned(1), exampletest.Spawned(2), exampletest.Spawned(3), exampletest.Spawned(4),
		exampletest.Ranks(2), exampletest.Ranks(3), exampletest.Ranks(4),
		{Name: "ddprun 2 × spawn 2", Launch: []string{"--nproc_per_node=2"}, Args: []string{"--spawn", "--cpu-devices", "2"}},
		exampletest.Ranks(3, "--zero"), exampletest.Spawned(4, "--zero"), exampletest.NamespaceHostsLayout(2),
	})
	t.Run("SIGTERM at 4, resumed at 3", func(t *testing.T) {
		ckdir := filepath.Join(t.TempDir(), "ck")
		rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
		at4 := exampletest.Job{Name: "mnist", Launch: []string{"--nproc_per_node=4"}, Args: append(args, "--checkpoint-every", "10")}
		at4.Preempt(t, ckdir, exampletest.Marks("step %d/200", 40, 60, 80, 100, 120), rng)
		at3 := exampletest.Job{Name: "mnist", Launch: []string{"--nproc_per_node=3"}, Args: append(args, "--checkpoint-every", "10")}
		out := at3.Resume(t, ckdir)
		assert.Equal(t, want, exampletest.WeightsDigest(t, out), "the job resumed at world 3 trained other weights")
	})
	t.Run("a node lost under --nnodes=1:2", func(t *testing.T) {
		out := exampletest.LoseANode(t, "mnist", append(args, "--checkpoint-every", "100"), 2, exampletest.Marks("step %d/200", 40, 60, 80, 100, 120))
		assert.Equal(t, want, exampletest.WeightsDigest(t, out), "the survivor trained other weights")
	})
}

// TestLongNoStepLostWhenANodeJoins: the seed's job (deterministic)
// under ddprun --nnodes=MIN:MAX gains a node at a random moment: the
// job's workers hold the step they all completed and go on in the same
// processes with the new node, which heals from a live peer's memory
// (with --zero: from the sharded checkpoint of that step); with a node
// of the job lost while the new one heals, the survivors commit the held
// step. Every trial redoes no completed step and ends with the
// uninterrupted run's weights.
func TestLongNoStepLostWhenANodeJoins(t *testing.T) {
	exampletest.CleanEnv(t)
	args := append(acceptance(t), "--checkpoint-every", "100")
	want := exampletest.WeightsDigest(t, exampletest.Ranks(2).Run(t, "mnist", args...))
	marks := exampletest.Marks("step %d/200", 20, 40, 60, 80)
	for _, extra := range [][]string{nil, {"--zero"}} {
		t.Run(fmt.Sprintf("%v a node joins", extra), func(t *testing.T) {
			out := exampletest.JoinANode(t, "mnist", append(slices.Clone(args), extra...), 2, marks)
			assert.Equal(t, want, exampletest.WeightsDigest(t, out), "the job that grew trained other weights")
		})
		t.Run(fmt.Sprintf("%v a node lost while another heals", extra), func(t *testing.T) {
			out := exampletest.JoinANodeAndLoseOne(t, "mnist", append(slices.Clone(args), extra...), 3, marks)
			assert.Equal(t, want, exampletest.WeightsDigest(t, out), "the job trained other weights")
		})
	}
}

// TestLongNoStepLostOnThreeHosts: the seed's job (deterministic) on
// three network-namespace hosts under ddprun --nnodes=2:3, plain and
// with its Adadelta state sharded (--zero); in each trial one host other
// than the store's loses its ddprun and worker (kill -9) at a random
// moment: no completed step is redone (the survivors say which step they
// committed, and the job resumes there) and the job ends with the
// uninterrupted run's weights; the same when a third host joins a job of
// two (healed from a live peer), and when one of the two is lost as it
// joins.
func TestLongNoStepLostOnThreeHosts(t *testing.T) {
	exampletest.CleanEnv(t)
	args := append(acceptance(t), "--checkpoint-every", "100")
	want := exampletest.WeightsDigest(t, exampletest.Ranks(2).Run(t, "mnist", args...))
	for _, extra := range [][]string{nil, {"--zero"}} {
		for trial := range 3 {
			t.Run(fmt.Sprintf("%v trial %d", extra, trial+1), func(t *testing.T) {
				out := exampletest.LoseANodeOfHosts(t, "mnist", append(slices.Clone(args), extra...), 3,
					exampletest.Marks("step %d/200", 20, 40, 60, 80, 100, 120, 140))
				assert.Equal(t, want, exampletest.WeightsDigest(t, out), "the job that lost a host trained other weights")
			})
		}
		t.Run(fmt.Sprintf("%v a host joins", extra), func(t *testing.T) {
			out := exampletest.JoinANodeOfHosts(t, "mnist", append(slices.Clone(args), extra...), 3, exampletest.Marks("step %d/200", 20, 40, 60, 80))
			assert.Equal(t, want, exampletest.WeightsDigest(t, out), "the job that gained a host trained other weights")
		})
		t.Run(fmt.Sprintf("%v a host lost while another joins", extra), func(t *testing.T) {
			out := exampletest.JoinANodeAndLoseOneOfHosts(t, "mnist", append(slices.Clone(args), extra...), 3, exampletest.Marks("step %d/200", 20, 40, 60, 80))
			assert.Equal(t, want, exampletest.WeightsDigest(t, out), "the job trained other weights")
		})
	}
}

// TestNoStepLostWithZeRO: the seed's job (deterministic) with its
// Adadelta state sharded over three nodes (--zero) under ddprun
// --nnodes=2:3; one node other than the store's is killed (kill -9 of
// its ddprun and worker) at a random moment. The lost node's shard is
// held by its buddy on another node, so the survivors commit the last
// step any of them completed, the job resumes there (0 steps redone) at
// two nodes and ends with the uninterrupted run's weights.
func TestNoStepLostWithZeRO(t *testing.T) {
	exampletest.CleanEnv(t)
	args := []string{"--deterministic", "--zero", "--batch-size", "48", "--micro-shard", "8", "--max-steps", "40", "--test-batch-size", "100",
		"--log-interval", "1", "--checkpoint-every", "1000", "--data", exampletest.MNISTSubset(t, 1920, 100)}
	want := exampletest.WeightsDigest(t, exampletest.Spawned(1).Run(t, "mnist", args...))
	out := exampletest.LoseANode(t, "mnist", args, 3, exampletest.Marks("step %d/40", 8, 12, 16, 20, 24, 28))
	assert.Contains(t, out, "assembled from the shards the survivors of a lost peer held")
	assert.Equal(t, want, exampletest.WeightsDigest(t, out), "the job that lost a node trained other weights")
}

// TestLongNoStepLostDuringWritesAndEvals: the seed's job (deterministic,
// three epochs of a small set, a checkpoint every second step, the test
// set evaluated after each epoch) under ddprun --nnodes=2:3; in each
// trial one node other than the store's is killed (kill -9 of its ddprun
// and worker) at a moment drawn across the steps, the periodic
// checkpoints' writes and the evaluations: the survivors go on in the
// same processes from the last step any of them completed (0 steps
// redone) and end with the uninterrupted run's weights.
func TestLongNoStepLostDuringWritesAndEvals(t *testing.T) {
	exampletest.CleanEnv(t)
	args := []string{"--deterministic", "--batch-size", "48", "--micro-shard", "8", "--epochs", "3", "--test-batch-size", "100",
		"--log-interval", "1", "--checkpoint-every", "2", "--data", exampletest.MNISTSubset(t, 1920, 300)}
	want := exampletest.WeightsDigest(t, exampletest.Spawned(1).Run(t, "mnist", args...))
	// From step 39 to the evaluation's line: step 40, its checkpoint and
	// the evaluation.
	marks := append(exampletest.Marks("step %d/40", 10, 20, 30, 39), "epoch 1: test accuracy", "epoch 2: test accuracy")
	for trial := range 5 {
		t.Run(fmt.Sprintf("trial %d", trial+1), func(t *testing.T) {
			out := exampletest.LoseANode(t, "mnist", args, 3, marks)
			assert.Equal(t, want, exampletest.WeightsDigest(t, out), "the job that lost a node trained other weights")
		})
	}
}

// TestLongStoppedWorkerIsLostAndNoStepIsLost: the seed's job
// (deterministic) on three ddprun nodes; a random non-store node's worker
// is SIGSTOPped (not killed) at a random moment: named as stopped within
// --stall_warn, handled as lost after --timeout (the survivors commit
// and go on; its agent starts a new worker that rejoins), with 0 steps
// redone and the uninterrupted run's weights.
func TestLongStoppedWorkerIsLostAndNoStepIsLost(t *testing.T) {
	exampletest.CleanEnv(t)
	args := []string{"--deterministic", "--batch-size", "48", "--micro-shard", "8", "--max-steps", "40", "--test-batch-size", "100",
		"--log-interval", "1", "--checkpoint-every", "1000", "--data", exampletest.MNISTSubset(t, 1920, 100)}
	want := exampletest.WeightsDigest(t, exampletest.Spawned(1).Run(t, "mnist", args...))
	out := exampletest.StopAWorker(t, "mnist", args, 3, exampletest.Marks("step %d/40", 8, 12, 16, 20, 24))
	assert.Equal(t, want, exampletest.WeightsDigest(t, out), "the job that lost a stopped worker trained other weights")
}
