package nn

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/xla"
)

// TestLosses checks each loss and reduction, and its gradient, against
// float64 closed forms: CE gradient softmax - onehot, MSE gradient 2(p-t).
// Tolerance 1e-5 absolute + 1e-5 relative.
func TestLosses(t *testing.T) {
	d := newEngine(t, 1).Device(0)
	ctx := testContext(t)
	logits := []float32{1, 2, 0.5, -1, 0, 3, 0.2, 0.1, -0.3}
	labels := []int32{1, 2, 0}
	n, c := 3, 3
	var ceSum float64
	ceGrad := make([]float64, len(logits))
	for i := range n {
		row := logits[i*c : (i+1)*c]
		maxV := math.Inf(-1)
		for _, v := range row {
			maxV = math.Max(maxV, float64(v))
		}
		var z float64
		for _, v := range row {
			z += math.Exp(float64(v) - maxV)
		}
		ceSum += -(float64(row[labels[i]]) - maxV - math.Log(z))
		for j, v := range row {
			ceGrad[i*c+j] = math.Exp(float64(v)-maxV) / z
			if int32(j) == labels[i] {
				ceGrad[i*c+j]--
			}
		}
	}
	for _, tc := range []struct {
		name      string
		reduction Reduction
		scale     float64
	}{{"mean", ReductionMean, 1.0 / 3}, {"sum", ReductionSum, 1}} {
		t.Run("CrossEntropy "+tc.name, func(t *testing.T) {
			x, err := xla.FromSlice(d, logits, n, c)
			require.NoError(t, err)
			require.NoError(t, x.SetRequiresGrad(true))
			y, err := xla.FromSlice(d, labels, n)
			require.NoError(t, err)
			loss := CrossEntropyLoss(x, y, tc.reduction)
			require.NoError(t, loss.Backward())
			v, err := loss.Item(ctx)
			require.NoError(t, err)
			assert.InDelta(t, ceSum*tc.scale, v, 1e-5+1e-5*ceSum)
			g, err := x.Grad().Float32s(ctx)
			require.NoError(t, err)
			for i := range g {
				assert.InDelta(t, ceGrad[i]*tc.scale, float64(g[i]), 1e-5+1e-5*math.Abs(ceGrad[i]))
			}
		})
	}
	t.Run("NLL none", func(t *testing.T) {
		logp, err := xla.FromSlice(d, []float32{-0.1, -2, -3, -1.5}, 2, 2)
		require.NoError(t, err)
		y, err := xla.FromSlice(d, []int32{1, 0}, 2)
		require.NoError(t, err)
		v, err := NLLLoss(logp, y, ReductionNone).Float32s(ctx)
		require.NoError(t, err)
		assert.Equal(t, []float32{2, 3}, v)
	})
	t.Run("MSE", func(t *testing.T) {
		p, err := xla.FromSlice(d, []float32{1, 2, 3, 4}, 2, 2)
		require.NoError(t, err)
		require.NoError(t, p.SetRequiresGrad(true))
		target, err := xla.FromSlice(d, []float32{0, 2, 5, 3}, 2, 2)
		require.NoError(t, err)
		loss := MSELoss(p, target, ReductionMean)
		require.NoError(t, loss.Backward())
		v, err := loss.Item(ctx)
		require.NoError(t, err)
		assert.InDelta(t, (1+0+4+1)/4.0, v, 1e-6)
		g, err := p.Grad().Float32s(ctx)
		require.NoError(t, err)
		assert.InDeltaSlice(t, []float64{0.5, 0, -1, 0.5}, toFloat64(g), 1e-6)
	})
	t.Run("bad labels", func(t *testing.T) {
		x, err := xla.FromSlice(d, logits, n, c)
		require.NoError(t, err)
		y, err := xla.FromSlice(d, []int32{1, 2}, 2)
		require.NoError(t, err)
		assert.ErrorContains(t, CrossEntropyLoss(x, y, ReductionMean).Err(),
			"nn: NLLLoss: needs logp [N, C] and labels [N], got (Float32)[3, 3] and (Int32)[2]")
	})
}

// TestBatchNormRunningStats: after one training step the running statistics
// follow torch's update (momentum 0.1, unbiased variance), the batch counter
// is 1, and eval mode normalizes with them.
func TestBatchNormRunningStats(t *testing.T) {
	d := newEngine(t, 1).Device(0)
	ctx := testContext(t)
	bn, err := NewBatchNorm2d(d, 1)
	require.NoError(t, err)
	values := []float32{1, 2, 3, 4, 5, 6}
	x, err := xla.FromSlice(d, values, 2, 1, 1, 3)
	require.NoError(t, err)
	_, err = bn.Forward(x).Float32s(ctx)
	require.NoError(t, err)
	mean, unbiased := 3.5, 17.5/5
	rm, err := bn.RunningMean.Float32s(ctx)
	require.NoError(t, err)
	rv, err := bn.RunningVar.Float32s(ctx)
	require.NoError(t, err)
	nbt, err := bn.NumBatchesTracked.Item(ctx)
	require.NoError(t, err)
	assert.InDelta(t, 0.1*mean, rm[0], 1e-6)
	assert.InDelta(t, 0.9+0.1*unbiased, rv[0], 1e-6)
	assert.Equal(t, 1.0, nbt)

	Eval(bn)
	y, err := bn.Forward(x).Float32s(ctx)
	require.NoError(t, err)
	for i, v := range values {
		want := (float64(v) - float64(rm[0])) / math.Sqrt(float64(rv[0])+1e-5)
		assert.InDelta(t, want, y[i], 1e-5)
	}
}

// TestDropout: in training about P of the elements are zeroed and the rest
// scaled by 1/(1-P) (20,000 draws: fraction within 0.02); eval is identity.
func TestDropout(t *testing.T) {
	d := newEngine(t, 1).Device(0)
	ctx := testContext(t)
	drop, err := NewDropout(0.3)
	require.NoError(t, err)
	ones := d.Ones(xla.Float32, 200, 100)
	v, err := drop.Forward(ones).Float32s(ctx)
	require.NoError(t, err)
	zeros := 0
	for _, x := range v {
		if x == 0 {
			zeros++
		} else {
			assert.InDelta(t, 1/0.7, x, 1e-6)
		}
	}
	assert.InDelta(t, 0.3, float64(zeros)/float64(len(v)), 0.02)
	Eval(drop)
	assert.Same(t, ones, drop.Forward(ones))
	_, err = NewDropout(1)
	assert.ErrorContains(t, err, "must be in [0, 1)")
}
