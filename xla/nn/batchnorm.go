package nn

import (
	"github.com/xladdp/xladdp/xla"
)

// BatchNorm2d is torch.nn.BatchNorm2d (affine, tracking running stats).
// In training it normalizes by the batch's statistics over N, H, W and
// updates running_mean/var with momentum (the variance unbiased); in eval it
// uses the running statistics.
type BatchNorm2d struct {
	Weight, Bias                               *xla.Tensor
	RunningMean, RunningVar, NumBatchesTracked *xla.Tensor
	Momentum, Eps                              float64
	training                                   bool
}

// NewBatchNorm2d creates the layer for c channels (momentum 0.1, eps 1e-5).
func NewBatchNorm2d(d *xla.Device, c int) (*BatchNorm2d, error) {
	b := &builder{dev: d}
	bn := &BatchNorm2d{
		Weight:      b.param(b.filled(1, c), c),
		Bias:        b.param(b.filled(0, c), c),
		RunningMean: b.upload(b.filled(0, c), c),
		RunningVar:  b.upload(b.filled(1, c), c),
		Momentum:    0.1, Eps: 1e-5, training: true,
	}
	if b.err == nil {
		bn.NumBatchesTracked, b.err = xla.FromSlice(d, []int64{0})
	}
	return bn, b.err
}

func (bn *BatchNorm2d) setTraining(on bool) { bn.training = on }

// Forward normalizes x [N, C, H, W].
func (bn *BatchNorm2d) Forward(x *xla.Tensor) *xla.Tensor {
	mean, variance := bn.RunningMean, bn.RunningVar
	if bn.training {
		mean = x.Mean(0, 2, 3)
		centered := x.Sub(mean.Reshape(1, -1, 1, 1))
		variance = centered.Square().Mean(0, 2, 3)
		n := float64(x.Shape().Size() / x.Dims()[1])
		unbiased := variance.MulScalar(n / max(n-1, 1))
		// Errors here would repeat the ones carried by the output. The
		// running statistics take no gradient (torch updates them under
		// no_grad).
		_ = bn.RunningMean.Assign(bn.RunningMean.MulScalar(1 - bn.Momentum).Add(mean.Detach().MulScalar(bn.Momentum)))
		_ = bn.RunningVar.Assign(bn.RunningVar.MulScalar(1 - bn.Momentum).Add(unbiased.Detach().MulScalar(bn.Momentum)))
		_ = bn.NumBatchesTracked.Assign(bn.NumBatchesTracked.AddScalar(1))
	}
	scale := bn.Weight.Div(variance.AddScalar(bn.Eps).Sqrt())
	shift := bn.Bias.Sub(mean.Mul(scale))
	return x.Mul(scale.Reshape(1, -1, 1, 1)).Add(shift.Reshape(1, -1, 1, 1))
}

// Params returns weight and bias.
func (bn *BatchNorm2d) Params() []Named { return []Named{{"weight", bn.Weight}, {"bias", bn.Bias}} }

// Buffers returns the running statistics and the batch counter.
func (bn *BatchNorm2d) Buffers() []Named {
	return []Named{{"running_mean", bn.RunningMean}, {"running_var", bn.RunningVar},
		{"num_batches_tracked", bn.NumBatchesTracked}}
}

// Children returns none.
func (bn *BatchNorm2d) Children() []NamedModule { return nil }
