package main

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/xla"
)

// TestOneEpochTwoReplicas trains the 784-128-10 MLP for one epoch of the
// real MNIST on 2 CPU replicas: test accuracy must reach 95% and the whole
// run, evaluation included, must take under 60 s. It also checks the
// loader kept the input wait under 5% of the loop and saved a checkpoint.
func TestOneEpochTwoReplicas(t *testing.T) {
	t.Setenv(xla.EnvCacheDir, t.TempDir())
	for _, env := range []string{"XLADDP_DEVICE", "PJRT_DEVICE", "XLADDP_CPU_DEVICES", "CPU_NUM_DEVICES"} {
		t.Setenv(env, "")
	}
	ckpt := filepath.Join(t.TempDir(), "mnist.safetensors")
	var out bytes.Buffer
	start := time.Now()
	res, err := run(context.Background(), []string{"--replicas", "2", "--epochs", "1", "--checkpoint", ckpt}, &out)
	require.NoError(t, err, "MNIST must be installed: run `make deps`")
	elapsed := time.Since(start)
	t.Logf("%saccuracy %.4f, input wait %v, %v in all", out.String(), res.Accuracy, res.InputWait, elapsed)
	assert.GreaterOrEqual(t, res.Accuracy, 0.95)
	assert.Less(t, elapsed, 60*time.Second)
	for r, w := range res.InputWait {
		assert.Less(t, w, 0.05, "replica %d waited on input", r)
	}
	assert.Contains(t, out.String(), "training a 784-128-10 MLP on 2 cpu replicas, batch 64 per replica, lr 0.05")
	assert.FileExists(t, ckpt)
}

func TestBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--replicas", "0"}, "--replicas=0: need at least 1"},
		{[]string{"--lr", "-1"}, "--lr=-1: must be positive"},
		{[]string{"--epochs", "0"}, "must be positive"},
		{[]string{"--data", "/nonexistent"}, "run `make deps` for MNIST"},
	} {
		_, err := run(context.Background(), tc.args, &bytes.Buffer{})
		require.Error(t, err, tc.args)
		assert.Contains(t, err.Error(), tc.want)
	}
}
