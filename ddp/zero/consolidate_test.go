package zero_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/ddp/checkpoint"
	"github.com/xladdp/xladdp/ddp/internal/ddptest"
	"github.com/xladdp/xladdp/ddp/zero"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/optim"
	"github.com/xladdp/xladdp/xla/safetensors"
	"github.com/xladdp/xladdp/xla/xlatest"
)

// EnvTorchPython names a Python with torch and safetensors: set, the
// consolidated checkpoint is also read by torch (make bench sets it to
// the peers' torch 2.9).
const EnvTorchPython = "XLADDP_TORCH_PYTHON"

// torchCompare loads two safetensors files with torch's loader and
// prints how many tensors each holds and the names whose tensors differ.
const torchCompare = `
import sys
import torch
from safetensors.torch import load_file

def bits(t):
    return t.reshape(-1).view(torch.uint8)

a, b = load_file(sys.argv[1]), load_file(sys.argv[2])
print(len(a), len(b))
for k in sorted(a):
    if k not in b or a[k].dtype != b[k].dtype or a[k].shape != b[k].shape or not torch.equal(bits(a[k]), bits(b[k])):
        print("differs", k)
`

// TestConsolidatedEqualsPlainCheckpoint: the GPT (AdamW with decay
// groups) trained 2 steps on 2 local replicas plain (checkpoint.Save)
// and sharded (checkpoint.Save, then ConsolidateCheckpoint): the
// consolidated file holds the plain checkpoint's tensors bit for bit,
// under the same torch names, and its metadata; torch's
// safetensors.torch.load_file reads both alike when $XLADDP_TORCH_PYTHON
// names a Python with torch.
func TestConsolidatedEqualsPlainCheckpoint(t *testing.T) {
	ctx := xlatest.Context(t)
	e := xlatest.NewEngine(t, 2)
	dir := t.TempDir()
	plain, sharded, whole := filepath.Join(dir, "plain.safetensors"), filepath.Join(dir, "sharded"), filepath.Join(dir, "whole.safetensors")
	for _, zeroOn := range []bool{false, true} {
		require.NoError(t, e.RunReplicas(ctx, 2, func(ctx context.Context, r xla.Replica) error {
			return trainAndSave(ctx, r, zeroOn, plain, sharded)
		}))
	}
	require.NoError(t, zero.ConsolidateCheckpoint(sharded, whole))
	want, err := safetensors.ReadFile(plain)
	require.NoError(t, err)
	got, err := safetensors.ReadFile(whole)
	require.NoError(t, err)
	require.Len(t, got.Tensors, len(want.Tensors))
	for _, w := range want.Tensors {
		g, ok := got.Lookup(w.Name)
		if assert.True(t, ok, "%s missing", w.Name) {
			assert.Equal(t, w.DType, g.DType, w.Name)
			assert.Equal(t, w.Shape, g.Shape, w.Name)
			assert.True(t, string(w.Data) == string(g.Data), "%s: other values", w.Name)
		}
	}
	for k, v := range want.Metadata {
		assert.Equal(t, v, got.Metadata[k], "metadata %s", k)
	}
	python := os.Getenv(EnvTorchPython)
	if python == "" {
		t.Logf("$%s unset: torch's read of the file is checked by make bench", EnvTorchPython)
		return
	}
	out, err := exec.Command(python, "-c", torchCompare, plain, whole).CombinedOutput()
	require.NoError(t, err, "%s", out)
	n := len(want.Tensors)
	assert.Equal(t, fmt.Sprintf("%d %d", n, n), strings.TrimSpace(string(out)), "torch read other tensors")
}

// trainAndSave trains the GPT 2 steps on replica r's rows and saves: the
// plain wrapper's checkpoint file, or the sharded optimizer's directory.
func trainAndSave(ctx context.Context, r xla.Replica, sharded bool, plainPath, shardedDir string) error {
	d := r.Device()
	step := 0
	inner, err := ddptest.NewModel(d, "gpt", 100, &step)
	if err != nil {
		return err
	}
	model, err := ddp.Wrap(ctx, inner)
	if err != nil {
		return err
	}
	defer model.Close()
	recipe := ddptest.OptimizerFor("gpt", "", model)
	var opt optim.Optimizer
	if sharded {
		opt, err = zero.New(ctx, model, recipe.Groups, recipe.Build)
	} else {
		opt, err = recipe.Build(recipe.Groups)
	}
	if err != nil {
		return err
	}
	rows := ddptest.GlobalRows / 2
	for range 2 {
		opt.ZeroGrad()
		loss, err := ddptest.LossOn(d, model, "gpt", r.Index()*rows, (r.Index()+1)*rows)
		if err != nil {
			return err
		}
		if err := optim.BackwardStep(ctx, loss, opt); err != nil {
			return err
		}
	}
	ck := optim.Checkpoint{Model: model, Optimizer: opt, Step: 2}
	if sharded {
		return checkpoint.Save(ctx, shardedDir, ck)
	}
	return checkpoint.Save(ctx, plainPath, ck)
}
