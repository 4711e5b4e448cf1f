package main

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/xla"
)

func TestShortRun(t *testing.T) {
	t.Setenv(xla.EnvCacheDir, t.TempDir())
	for _, env := range []string{"XLADDP_DEVICE", "PJRT_DEVICE", "XLADDP_CPU_DEVICES", "CPU_NUM_DEVICES"} {
		t.Setenv(env, "")
	}
	ckpt := filepath.Join(t.TempDir(), "mnist.safetensors")
	var out bytes.Buffer
	err := run(context.Background(), []string{"--replicas", "2", "--max-batches", "100", "--checkpoint", ckpt}, &out)
	require.NoError(t, err, "MNIST must be installed: run `make deps`")
	text := out.String()
	assert.Contains(t, text, "training a 784-128-10 MLP on 2 cpu replicas, batch 64 per replica, lr 0.05")
	assert.Contains(t, text, "epoch 1: last batch loss")
	assert.Contains(t, text, "test accuracy")
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
		err := run(context.Background(), tc.args, &bytes.Buffer{})
		require.Error(t, err, tc.args)
		assert.Contains(t, err.Error(), tc.want)
	}
}
