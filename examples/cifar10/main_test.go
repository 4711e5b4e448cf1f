package main

import (
	"bytes"
	"context"
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/examples/internal/exampletest"
	"github.com/xladdp/xladdp/xla"
)

func TestMain(m *testing.M) { exampletest.Main(m, "cifar10", main) }

// TestRunsWithAndWithoutDDP: with no CIFAR-10 in --data the program says
// where to put it and trains on synthetic data; the DDP run (2 spawned
// replicas) and the --no-ddp baseline both print the tutorial's total
// training time, and the snapshot lets a later run resume.
// This checks the plumbing only: ResNet-18 needs far more steps than a
// test can afford to show learning (see the issue note).
func TestRunsWithAndWithoutDDP(t *testing.T) {
	t.Setenv(xla.EnvCacheDir, t.TempDir())
	for _, k := range []string{"XLADDP_DEVICE", "PJRT_DEVICE", "RANK", "WORLD_SIZE"} {
		t.Setenv(k, "")
	}
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
	} {
		_, err := run(context.Background(), tc.args, &bytes.Buffer{})
		assert.ErrorContains(t, err, tc.want, "%v", tc.args)
	}
}
