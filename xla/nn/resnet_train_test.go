package nn

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/xla"
)

// TestResNet18TrainStepAt224: a 2×3×224×224 batch gives 2×1000 logits, and
// a full training step (forward, cross-entropy, backward, SGD on all 62
// parameters, BatchNorm statistics) compiles once: the second step runs
// from cache and the loss stays finite.
func TestResNet18TrainStepAt224(t *testing.T) {
	d := newEngine(t, 1).Device(0)
	ctx := testContext(t)
	model, err := NewResNet18(d, NewRand(3), ResNetConfig{NumClasses: 1000})
	require.NoError(t, err)
	x := d.RandN(xla.Float32, 2, 3, 224, 224)
	labels, err := xla.FromSlice(d, []int32{3, 997}, 2)
	require.NoError(t, err)
	require.NoError(t, d.MarkStep(ctx)) // materialize the input batch
	params := Parameters(model)
	xla.ResetMetrics()
	var losses []float64
	for range 2 {
		logits := model.Forward(x)
		require.Equal(t, []int{2, 1000}, logits.Dims())
		loss := CrossEntropyLoss(logits, labels, ReductionMean)
		require.NoError(t, loss.Backward())
		for _, p := range params {
			require.NoError(t, p.Assign(p.Sub(p.Grad().MulScalar(0.01))))
			p.ZeroGrad()
		}
		require.NoError(t, d.MarkStep(ctx))
		v, err := loss.Item(ctx)
		require.NoError(t, err)
		losses = append(losses, v)
	}
	m := xla.GetMetrics()
	assert.EqualValues(t, 1, m.Compilations, "one compilation for both steps")
	assert.EqualValues(t, 1, m.CacheHits)
	t.Logf("losses %v; compile %v, execute %v for 2 steps", losses, m.CompileTime, m.ExecuteTime)
	for _, l := range losses {
		assert.False(t, l != l || l > 20, "loss %v is finite and sane", l)
	}
}
