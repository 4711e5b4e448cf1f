package optim

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/safetensors"
	"github.com/xladdp/xladdp/xla/xlatest"
)

func newDevice(t *testing.T) *xla.Device { return xlatest.NewEngine(t, 1).Device(0) }

type trajectories struct {
	P0, W, C   []float64
	Optimizers map[string][][]float64
	Schedulers map[string][]float64
}

func loadTrajectories(t *testing.T) trajectories {
	raw, err := os.ReadFile("testdata/torch_trajectories.json")
	require.NoError(t, err)
	var tr trajectories
	require.NoError(t, json.Unmarshal(raw, &tr))
	return tr
}

// TestOptimizersMatchTorch runs each optimizer for 6 steps on torch's
// problem (loss = Σ w·(p−c)²) in float64, as torch did, and compares every
// step's parameters with torch's trajectory within 1e-12 absolute + 1e-12
// relative: the same arithmetic, up to operation order. The 6 steps compile
// once.
func TestOptimizersMatchTorch(t *testing.T) {
	tr := loadTrajectories(t)
	makers := map[string]func([]*xla.Tensor) (Optimizer, error){
		"sgd":          func(p []*xla.Tensor) (Optimizer, error) { return NewSGD(p, SGDConfig{LR: 0.1}) },
		"sgd_momentum": func(p []*xla.Tensor) (Optimizer, error) { return NewSGD(p, SGDConfig{LR: 0.05, Momentum: 0.9}) },
		"sgd_dampening_wd": func(p []*xla.Tensor) (Optimizer, error) {
			return NewSGD(p, SGDConfig{LR: 0.05, Momentum: 0.8, Dampening: 0.3, WeightDecay: 0.1})
		},
		"sgd_nesterov": func(p []*xla.Tensor) (Optimizer, error) {
			return NewSGD(p, SGDConfig{LR: 0.05, Momentum: 0.9, Nesterov: true, WeightDecay: 0.01})
		},
		"adam": func(p []*xla.Tensor) (Optimizer, error) { return NewAdam(p, AdamConfig{LR: 0.1}) },
		"adam_wd": func(p []*xla.Tensor) (Optimizer, error) {
			return NewAdam(p, AdamConfig{LR: 0.05, Beta1: 0.8, Beta2: 0.99, Eps: 1e-6, WeightDecay: 0.1})
		},
		"adamw":    func(p []*xla.Tensor) (Optimizer, error) { return NewAdamW(p, AdamConfig{LR: 0.05, WeightDecay: 0.1}) },
		"adadelta": func(p []*xla.Tensor) (Optimizer, error) { return NewAdadelta(p, AdadeltaConfig{LR: 1}) },
		"adadelta_wd": func(p []*xla.Tensor) (Optimizer, error) {
			return NewAdadelta(p, AdadeltaConfig{LR: 0.5, Rho: 0.8, Eps: 1e-5, WeightDecay: 0.05})
		},
	}
	require.Len(t, tr.Optimizers, len(makers))
	for name, want := range tr.Optimizers {
		t.Run(name, func(t *testing.T) {
			d := newDevice(t)
			ctx := context.Background()
			p, err := xla.FromSlice(d, tr.P0, len(tr.P0))
			require.NoError(t, err)
			require.NoError(t, p.SetRequiresGrad(true))
			w, err := xla.FromSlice(d, tr.W, len(tr.W))
			require.NoError(t, err)
			c, err := xla.FromSlice(d, tr.C, len(tr.C))
			require.NoError(t, err)
			opt, err := makers[name]([]*xla.Tensor{p})
			require.NoError(t, err)
			xla.ResetMetrics()
			for step, wantP := range want {
				opt.ZeroGrad()
				require.NoError(t, w.Mul(p.Sub(c).Square()).Sum().Backward())
				require.NoError(t, opt.Step())
				got, err := xla.Values[float64](ctx, p)
				require.NoError(t, err)
				for i := range wantP {
					assert.InDelta(t, wantP[i], got[i], 1e-12+1e-12*abs(wantP[i]), "step %d p[%d]", step, i)
				}
			}
			assert.EqualValues(t, 1, xla.GetMetrics().Compilations, "state is created up front: one program for every step")
		})
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

func TestSchedulersMatchTorch(t *testing.T) {
	tr := loadTrajectories(t)
	d := newDevice(t)
	p, err := xla.FromSlice(d, []float32{0}, 1)
	require.NoError(t, err)
	require.NoError(t, p.SetRequiresGrad(true))
	makers := map[string]func(Optimizer) (Scheduler, error){
		"step":   func(o Optimizer) (Scheduler, error) { return NewStepLR(o, 3, 0.5) },
		"cosine": func(o Optimizer) (Scheduler, error) { return NewCosineAnnealingLR(o, 5, 0.01) },
		"warmup": func(o Optimizer) (Scheduler, error) { return NewLinearWarmup(o, 0.25, 4) },
	}
	for name, want := range tr.Schedulers {
		opt, err := NewSGD([]*xla.Tensor{p}, SGDConfig{LR: 0.1})
		require.NoError(t, err)
		s, err := makers[name](opt)
		require.NoError(t, err)
		for epoch, lr := range want {
			assert.InDelta(t, lr, opt.LR(), 1e-12, "%s epoch %d", name, epoch)
			s.Step()
		}
	}
	_, err = NewStepLR(nil, 0, 0.5)
	assert.ErrorContains(t, err, "StepLR step size 0 must be >= 1")
}

// trainMLP builds a small MLP and Adam on d (seeded), and returns a
// function that runs one recorded training step and reports its loss.
func trainMLP(t *testing.T, d *xla.Device, seed uint64) (nn.Module, Optimizer, func() float64) {
	return trainMLPWith(t, d, seed, 8, 0)
}

// trainMLPWith is trainMLP with hidden units and, for dropout > 0, a
// Dropout after the ReLU (drawing a mask from d's RNG each step).
func trainMLPWith(t *testing.T, d *xla.Device, seed uint64, hidden int, dropout float64) (nn.Module, Optimizer, func() float64) {
	l1, err := nn.NewLinear(d, nn.NewRand(seed), 4, hidden, true)
	require.NoError(t, err)
	l2, err := nn.NewLinear(d, nn.NewRand(seed+1), hidden, 3, true)
	require.NoError(t, err)
	layers := []nn.Module{l1, nn.ReLU{}}
	if dropout > 0 {
		drop, err := nn.NewDropout(dropout)
		require.NoError(t, err)
		layers = append(layers, drop)
	}
	model := nn.NewSequential(append(layers, l2)...)
	opt, err := NewAdam(nn.Parameters(model), AdamConfig{LR: 0.01})
	require.NoError(t, err)
	x, err := xla.FromSlice(d, []float32{1, 2, 3, 4, -1, 0.5, 2, -2, 0, 1, -3, 1}, 3, 4)
	require.NoError(t, err)
	y, err := xla.FromSlice(d, []int32{0, 2, 1}, 3)
	require.NoError(t, err)
	step := func() float64 {
		opt.ZeroGrad()
		loss := nn.CrossEntropyLoss(model.Forward(x), y, nn.ReductionMean)
		require.NoError(t, loss.Backward())
		require.NoError(t, opt.Step())
		v, err := loss.Item(context.Background())
		require.NoError(t, err)
		return v
	}
	return model, opt, step
}

func snapshot(t *testing.T, named []nn.Named) map[string][]byte {
	out := map[string][]byte{}
	for _, n := range named {
		b, err := n.Tensor.Bytes(context.Background())
		require.NoError(t, err)
		out[n.Name] = b
	}
	return out
}

// TestCheckpointResume: a checkpoint restores parameters and optimizer
// state bit for bit, and training resumed from it gives exactly the losses
// of an uninterrupted run.
func TestCheckpointResume(t *testing.T) {
	d := newDevice(t)
	_, _, step := trainMLP(t, d, 1)
	var uninterrupted []float64
	for range 6 {
		uninterrupted = append(uninterrupted, step())
	}

	model, opt, step := trainMLP(t, d, 1)
	for range 3 {
		step()
	}
	path := filepath.Join(t.TempDir(), "ckpt.safetensors")
	ctx := context.Background()
	require.NoError(t, WriteCheckpointFile(ctx, path, Checkpoint{Model: model, Optimizer: opt, Step: 3, Epoch: 1,
		Metadata: map[string]string{"note": "mid-run"}}))
	savedModel, savedOpt := snapshot(t, nn.StateDict(model)), snapshot(t, opt.State())

	fresh, freshOpt, freshStep := trainMLP(t, d, 99) // different initial weights
	c := Checkpoint{Model: fresh, Optimizer: freshOpt}
	require.NoError(t, ReadCheckpointFile(path, &c))
	assert.Equal(t, 3, c.Step)
	assert.Equal(t, 1, c.Epoch)
	assert.Equal(t, "mid-run", c.Metadata["note"])
	assert.Equal(t, savedModel, snapshot(t, nn.StateDict(fresh)), "parameters restored bit for bit")
	assert.Equal(t, savedOpt, snapshot(t, freshOpt.State()), "optimizer state restored bit for bit")
	var resumed []float64
	for range 3 {
		resumed = append(resumed, freshStep())
	}
	assert.Equal(t, uninterrupted[3:], resumed, "resumed training repeats the uninterrupted losses exactly")
}

func TestCheckpointErrors(t *testing.T) {
	d := newDevice(t)
	ctx := context.Background()
	model, opt, _ := trainMLP(t, d, 1)
	dir := t.TempDir()
	good := filepath.Join(dir, "good.safetensors")
	require.NoError(t, WriteCheckpointFile(ctx, good, Checkpoint{Model: model, Optimizer: opt}))

	other, err := nn.NewLinear(d, nn.NewRand(1), 4, 5, true)
	require.NoError(t, err)
	err = ReadCheckpointFile(good, &Checkpoint{Model: nn.NewSequential(other)})
	require.Error(t, err)
	for _, want := range []string{"does not match", "mis-shaped: 0.weight (file F32[8 4], model F32[5 4])",
		"0.bias (file F32[8], model F32[5])", "unexpected: 2.bias, 2.weight"} {
		assert.Contains(t, err.Error(), want)
	}

	data, err := os.ReadFile(good)
	require.NoError(t, err)
	truncated := filepath.Join(dir, "truncated.safetensors")
	require.NoError(t, os.WriteFile(truncated, data[:len(data)-10], 0o644))
	err = ReadCheckpointFile(truncated, &Checkpoint{Model: model, Optimizer: opt})
	assert.ErrorContains(t, err, "truncated.safetensors")
	assert.ErrorContains(t, err, "outside the")

	modelOnly := filepath.Join(dir, "model.safetensors")
	require.NoError(t, nn.SaveStateDict(ctx, modelOnly, model, nil))
	err = ReadCheckpointFile(modelOnly, &Checkpoint{Model: model})
	assert.ErrorContains(t, err, "is not a training checkpoint")
	_, err = nn.LoadStateDict(good, model)
	assert.ErrorContains(t, err, "missing: 0.weight")

	f, err := safetensors.ReadFile(good)
	require.NoError(t, err)
	assert.Contains(t, f.Metadata["optimizer"], `"lr":0.01`)
}

// TestFailedCheckpointLoadChangesNothing: every way a checkpoint can be
// bad (metadata, a missing or mis-shaped optimizer tensor) fails before
// anything is assigned. A non-numeric lr used to fail after the model and
// optimizer had been overwritten.
func TestFailedCheckpointLoadChangesNothing(t *testing.T) {
	d := newDevice(t)
	ctx := context.Background()
	dir := t.TempDir()
	trained, trainedOpt, step := trainMLP(t, d, 1)
	step()
	source := filepath.Join(dir, "trained.safetensors")
	require.NoError(t, WriteCheckpointFile(ctx, source, Checkpoint{Model: trained, Optimizer: trainedOpt, Step: 1}))
	file, err := safetensors.ReadFile(source)
	require.NoError(t, err)

	variant := func(name string, edit func(f *safetensors.File)) string {
		f := safetensors.File{Metadata: map[string]string{}, Tensors: slices.Clone(file.Tensors)}
		maps.Copy(f.Metadata, file.Metadata)
		edit(&f)
		path := filepath.Join(dir, name+".safetensors")
		require.NoError(t, safetensors.WriteFile(path, f))
		return path
	}
	cases := []struct {
		name string
		edit func(f *safetensors.File)
		want string
	}{
		{"non-numeric lr", func(f *safetensors.File) { f.Metadata["lr"] = "fast" }, `learning rate metadata "fast"`},
		{"negative lr", func(f *safetensors.File) { f.Metadata["lr"] = "-1" }, `learning rate metadata "-1"`},
		{"NaN lr", func(f *safetensors.File) { f.Metadata["lr"] = "NaN" }, `learning rate metadata "NaN"`},
		{"negative step", func(f *safetensors.File) { f.Metadata["step"] = "-3" }, "negative step -3"},
		{"no optimizer metadata", func(f *safetensors.File) { delete(f.Metadata, "optimizer") }, "holds no optimizer state"},
		{"optimizer tensor missing", func(f *safetensors.File) {
			f.Tensors = slices.DeleteFunc(f.Tensors, func(t safetensors.Tensor) bool { return t.Name == "optimizer.step" })
		}, "missing: step"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			model, opt, _ := trainMLP(t, d, 1)
			before := snapshot(t, append(nn.StateDict(model), opt.State()...))
			lr := opt.LR()
			err := ReadCheckpointFile(variant(strings.ReplaceAll(c.name, " ", "_"), c.edit), &Checkpoint{Model: model, Optimizer: opt})
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
			assert.Equal(t, before, snapshot(t, append(nn.StateDict(model), opt.State()...)), "model and optimizer unchanged")
			assert.Equal(t, lr, opt.LR())
		})
	}
}
