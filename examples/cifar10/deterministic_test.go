package main

import (
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/xladdp/xladdp/examples/internal/exampletest"
)

// TestLongDeterministicSameWeightsAndStatistics: ResNet-18 with
// BatchNorm and the tutorial's augmentation, --deterministic at a global
// batch of 16 in micro-shards of 4: the same parameters and BatchNorm
// statistics, bit for bit, on one replica, 3 spawned replicas (4
// micro-shards over 3: padding), 2 processes under ddprun, 2 processes ×
// 2 local replicas; and a job SIGTERMed at world 2 and
// resumed at world 3.
func TestLongDeterministicSameWeightsAndStatistics(t *testing.T) {
	exampletest.CleanEnv(t)
	args := []string{"--synthetic", "--synthetic-samples", "320", "--deterministic", "--batch-size", "16", "--micro-shard", "4",
		"--max-steps", "15", "--log-interval", "1"}
	want := exampletest.SameWeightsEverywhere(t, "cifar10", args, []exampletest.Layout{
		exampletest.Spawned(1), exampletest.Spawned(3), exampletest.Ranks(2),
		{Name: "ddprun 2 × spawn 2", Launch: []string{"--nproc_per_node=2"}, Args: []string{"--spawn", "--cpu-devices", "2"}},
	})
	t.Run("SIGTERM at 2, resumed at 3", func(t *testing.T) {
		ckdir := filepath.Join(t.TempDir(), "ck")
		rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
		ck := append(args, "--checkpoint-every", "2")
		at2 := exampletest.Job{Name: "cifar10", Launch: []string{"--nproc_per_node=2"}, Args: ck}
		at2.Preempt(t, ckdir, exampletest.Marks("step %d/15", 1, 5), rng)
		at3 := exampletest.Job{Name: "cifar10", Launch: []string{"--nproc_per_node=3"}, Args: ck}
		out := at3.Resume(t, ckdir)
		assert.Equal(t, want, exampletest.WeightsDigest(t, out), "the job resumed at world 3 trained other weights or statistics")
	})
}
