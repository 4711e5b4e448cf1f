package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/examples/internal/exampletest"
)

func TestMain(m *testing.M) { exampletest.Main(m, "cifar10", main) }

// TestLongRunsWithAndWithoutDDP: with no CIFAR-10 in --data the program says
// where to put it and trains on synthetic data; the DDP run (2 spawned
// replicas) and the --no-ddp baseline both print the tutorial's total
// training time, and the snapshot lets a later run resume.
// Learning is TestLearnsSpawnedAndUnderDdprun's.
func TestLongRunsWithAndWithoutDDP(t *testing.T) {
	exampletest.CleanEnv(t)
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "snapshot.safetensors")
	common := []string{"--data", filepath.Join(dir, "none"), "--max-steps", "2", "--batch-size", "4", "--synthetic-samples", "100"}
	var out bytes.Buffer
	res, err := run(t.Context(), append(common, "--spawn", "--cpu-devices", "2", "--checkpoint", ckpt), &out)
	require.NoError(t, err, out.String())
	assert.True(t, res.Synthetic)
	assert.Contains(t, out.String(), "CIFAR-10 is not in "+filepath.Join(dir, "none")+": put the binary version's data_batch_1.bin")
	assert.Contains(t, out.String(), "Total training time:")
	assert.Contains(t, out.String(), "(2 replica(s), 2 steps")
	assert.False(t, math.IsNaN(res.FinalLoss) || res.FinalLoss <= 0, "loss %v", res.FinalLoss)
	assert.FileExists(t, ckpt)

	out.Reset()
	res, err = run(t.Context(), append(common, "--no-ddp", "--synthetic"), &out)
	require.NoError(t, err, out.String())
	assert.Contains(t, out.String(), "(1 replica(s), 2 steps")
	assert.NotContains(t, out.String(), "CIFAR-10 is not in", "--synthetic asked for it")

	out.Reset()
	res, err = run(t.Context(), append(common, "--spawn", "--cpu-devices", "2", "--checkpoint", ckpt, "--resume", "--epochs", "2"), &out)
	require.NoError(t, err, out.String())
	assert.Equal(t, 1, res.ResumedAt)
	assert.NotContains(t, out.String(), "Epoch 0 |")
	assert.Contains(t, out.String(), "Epoch 1 |")
}

func TestBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--epochs", "0"}, "must be positive"},
		{[]string{"--lr", "-0.1"}, "--lr=-0.1"},
		{[]string{"--max-steps", "-1"}, "--max-steps=-1"},
		{[]string{"--resume"}, "--resume needs --checkpoint"},
		{[]string{"--no-ddp", "--spawn"}, "leave out --spawn"},
		{[]string{"x"}, `unexpected argument "x"`},
		{[]string{"--spawn", "--synthetic", "--synthetic-samples", "100", "--batch-size", "64"},
			"each of the 2 replicas reads 50 of the 100 training samples, less than one batch of 64: no step would run"},
		{[]string{"--spawn", "--synthetic", "--plot", "/nonexistent/curves.png"}, "--plot /nonexistent/curves.png: its directory"},
		{[]string{"--no-ddp", "--deterministic"}, "leave out --no-ddp"},
		{[]string{"--spawn", "--deterministic", "--batch-size", "12", "--micro-shard", "5"}, "does not divide the global batch of 12"},
	} {
		_, err := run(context.Background(), tc.args, &bytes.Buffer{})
		assert.ErrorContains(t, err, tc.want, "%v", tc.args)
	}
}

// writeFixture writes CIFAR-10 binary batches of two classes a network
// can tell apart in a few steps (class 0 red, class 1 blue, with noise):
// 200 training and 100 test images.
func writeFixture(t *testing.T, dir string) {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	write := func(name string, n int) {
		var b bytes.Buffer
		for i := range n {
			label := byte(i % 2)
			b.WriteByte(label)
			for c := range 3 {
				for range 1024 {
					base := 40
					if (c == 0 && label == 0) || (c == 2 && label == 1) {
						base = 200
					}
					b.WriteByte(byte(base + rng.IntN(61) - 30))
				}
			}
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b.Bytes(), 0o644))
	}
	for k := 1; k <= 5; k++ {
		write(fmt.Sprintf("data_batch_%d.bin", k), 40)
	}
	write("test_batch.bin", 100)
}

// TestLongLearnsSpawnedAndUnderDdprun trains on a two-class fixture in the
// real binary format for 10 steps of 8 per replica: spawned on 2 replicas
// and as 2 ranks under ddprun, test accuracy passes 90% (chance: 50%).
func TestLongLearnsSpawnedAndUnderDdprun(t *testing.T) {
	exampletest.CleanEnv(t)
	dir := t.TempDir()
	writeFixture(t, dir)
	args := []string{"--data", dir, "--max-steps", "10", "--batch-size", "8"}
	var out bytes.Buffer
	res, err := run(t.Context(), append(args, "--spawn", "--cpu-devices", "2"), &out)
	require.NoError(t, err, out.String())
	assert.False(t, res.Synthetic)
	assert.Greater(t, res.Accuracy, 0.9, out.String())

	cmd := exec.Command(exampletest.Ddprun(t), append([]string{"--nproc_per_node=2"}, exampletest.Self()...)...)
	cmd.Env = append(os.Environ(), exampletest.Env("cifar10", args...)...)
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", b)
	m := regexp.MustCompile(`\[rank0\]:epoch 1: test accuracy (\d+\.\d+)%`).FindSubmatch(b)
	require.NotNil(t, m, "%s", b)
	acc, _ := strconv.ParseFloat(string(m[1]), 64)
	assert.Greater(t, acc, 90.0, "%s", b)
}

// TestLongPreemptedResumesBitIdentical: SIGTERM to ddprun (2 ranks,
// ResNet-18 with BatchNorm on synthetic data) at a random step of the
// epoch: exit 75; the same command again resumes mid-epoch and ends with
// the uninterrupted run's weights and BatchNorm buffers, bit for bit.
// Three trials at different moments; then three kill -9s of a random
// rank under --max_restarts=2, restarted from the last periodic
// checkpoint to the same bits.
func TestLongPreemptedResumesBitIdentical(t *testing.T) {
	exampletest.CleanEnv(t)
	job := exampletest.Job{Name: "cifar10", Launch: []string{"--nproc_per_node=2"}, Args: []string{"--synthetic", "--synthetic-samples", "96",
		"--batch-size", "4", "--max-steps", "12", "--log-interval", "1", "--checkpoint-every", "3"}}
	want := job.Weights(t)
	job.Trials(t, 3, want, exampletest.Marks("step %d/12", 1, 5))
}
