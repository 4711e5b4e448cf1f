package optim

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/safetensors"
)

// TestSnapshotIsWrittenWhileTrainingGoesOn: a snapshot taken after a
// compiled step (whose program updates parameters and Adam's state in
// place, donating their buffers) is written on another goroutine, four
// times over, while ten more steps run; every file holds the values of
// the step it was taken at, bit for bit, random state included, and the
// steps after it go back to updating in place. Run with -race too.
func TestSnapshotIsWrittenWhileTrainingGoesOn(t *testing.T) {
	ctx := context.Background()
	d := newDevice(t)
	require.NoError(t, d.ManualSeed(5))
	model, opt, _ := trainDropoutMLP(t, d, 3)
	x, err := xla.FromSlice(d, []float32{1, 2, 3, 4, -1, 0.5, 2, -2, 0, 1, -3, 1}, 3, 4)
	require.NoError(t, err)
	step := xla.Compile(func(...*xla.Tensor) ([]*xla.Tensor, error) {
		opt.ZeroGrad()
		if err := model.Forward(x).Square().Mean().Backward(); err != nil {
			return nil, err
		}
		return nil, opt.Step()
	})
	run := func(n int) {
		for range n {
			_, err := step.Run(ctx, d)
			require.NoError(t, err)
		}
	}
	run(3)
	c := Checkpoint{Model: model, Optimizer: opt, Step: 3, RNG: d}
	want := snapshot(t, append(prefixed(modelPrefix, nn.StateDict(model)), prefixed(optimizerPrefix, opt.State())...))
	wantRNG, err := d.RNGState().Bytes(ctx)
	require.NoError(t, err)

	snap, err := TakeSnapshot(ctx, c)
	require.NoError(t, err)
	dir := t.TempDir()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	wg.Add(1)
	go func() {
		defer wg.Done()
		var s safetensors.Streamer
		for i := range errs {
			errs[i] = snap.WriteFile(filepath.Join(dir, string(rune('a'+i))+".safetensors"), &s)
		}
	}()
	xla.ResetMetrics()
	run(10)
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "write %d", i)
	}
	assert.GreaterOrEqual(t, xla.GetMetrics().DonatedBuffers, int64(8*len(want)),
		"the steps after the one that gave up its buffers update in place again")
	now := snapshot(t, prefixed(modelPrefix, nn.StateDict(model)))
	for i := range errs {
		f, err := safetensors.ReadFile(filepath.Join(dir, string(rune('a'+i))+".safetensors"))
		require.NoError(t, err)
		assert.Equal(t, "3", f.Metadata["step"])
		for name, data := range want {
			got, ok := f.Lookup(name)
			require.True(t, ok, name)
			assert.Equal(t, data, got.Data, "file %d: %s as it was at step 3", i, name)
			if m, ok := now[name]; ok {
				assert.NotEqual(t, m, got.Data, "%s moved on since", name)
			}
		}
		rng, ok := f.Lookup(rngPrefix + "device")
		require.True(t, ok)
		assert.Equal(t, wantRNG, rng.Data, "file %d: the random state of step 3", i)
	}
}
