package optim

import (
	"fmt"
	"math"

	"github.com/xladdp/xladdp/xla"
)

// ClipGradNorm scales the gradients of params in place so that their
// global norm is at most maxNorm, torch.nn.utils.clip_grad_norm_: the
// total norm of all gradients together (normType 2, any p > 0, or
// math.Inf(1) for the largest magnitude) is computed in float32 (the
// gradients' dtype for float64; the 2-norm's sum of squares in float64
// where the device has it, rounded to float32), each gradient is
// multiplied by
// min(maxNorm/(norm+1e-6), 1), and the norm (before clipping) is returned
// as a scalar tensor.
//
// Everything is recorded into the step's program: nothing is read back to
// the host, and maxNorm is a program input (Device.Hyperparameter), so
// neither a new norm nor a new maxNorm recompiles. A NaN or infinite
// gradient makes the norm NaN or +Inf and, as in torch without
// error_if_nonfinite, the clipped gradients NaN (0 for finite entries
// under an infinite norm); raising on it would need a host read. Call it
// after Backward (a DDP wrapper has averaged the gradients there) and
// before the optimizer's Step; parameters without a gradient are skipped.
func ClipGradNorm(params []*xla.Tensor, maxNorm, normType float64) (*xla.Tensor, error) {
	return ClipGradNormAcross(params, maxNorm, normType, nil)
}

// ClipGradNormAcross is ClipGradNorm over gradients split across replicas,
// a sharded optimizer's: across combines this replica's partial (the sum
// of |g|^p of its gradients, or their largest magnitude for the infinity
// norm, told by max) with every other replica's and returns the job's; a
// nil across is ClipGradNorm.
func ClipGradNormAcross(params []*xla.Tensor, maxNorm, normType float64,
	across func(partial *xla.Tensor, max bool) (*xla.Tensor, error)) (*xla.Tensor, error) {
	if !(maxNorm >= 0) || math.IsInf(maxNorm, 0) {
		return nil, fmt.Errorf("optim: ClipGradNorm max norm %g: must be finite and >= 0", maxNorm)
	}
	if !(normType > 0) {
		return nil, fmt.Errorf("optim: ClipGradNorm norm type %g: must be > 0 (2, or math.Inf(1) for the max norm)", normType)
	}
	grads, err := gradsOf(params)
	if err != nil {
		return nil, err
	}
	if len(grads) == 0 {
		if len(params) == 0 {
			return nil, fmt.Errorf("optim: ClipGradNorm: no parameters")
		}
		return params[0].Device().Zeros(xla.Float32), nil
	}
	d := grads[0].Device()
	dt := xla.OpMathDType(grads[0].DType())
	total, err := partialNorm(grads, normType)
	if err != nil {
		return nil, err
	}
	if across != nil {
		if total, err = across(total, math.IsInf(normType, 1)); err != nil {
			return nil, err
		}
	}
	total = total.Cast(dt)
	switch {
	case normType == 2:
		total = total.Sqrt()
	case !math.IsInf(normType, 1):
		total = total.PowScalar(1 / normType)
	}
	coef := d.Hyperparameter(maxNorm, dt).Div(total.AddScalar(1e-6)).Minimum(d.Ones(dt))
	for _, p := range params {
		if g := p.Grad(); g != nil {
			if err := p.SetGrad(g.Mul(coef.Cast(g.DType()))); err != nil {
				return nil, err
			}
		}
	}
	return total, total.Err()
}

// gradsOf is the parameters' gradients, skipping those without one.
func gradsOf(params []*xla.Tensor) ([]*xla.Tensor, error) {
	var grads []*xla.Tensor
	for i, p := range params {
		if p == nil {
			return nil, fmt.Errorf("optim: ClipGradNorm: parameter %d is nil", i)
		}
		if g := p.Grad(); g != nil {
			if err := g.Err(); err != nil {
				return nil, err
			}
			grads = append(grads, g)
		}
	}
	return grads, nil
}

// partialNorm is the norm of grads (all on one device) before its root:
// the sum of the normType-th powers of the magnitudes, or their max for
// the infinity norm.
func partialNorm(grads []*xla.Tensor, normType float64) (*xla.Tensor, error) {
	d := grads[0].Device()
	dt := xla.OpMathDType(grads[0].DType())
	// The 2-norm sums the squares in float64 where the device has it (a
	// float32 square is exact there) and rounds the sum to float32 once:
	// however the gradients are split (per parameter here, per shard and
	// replica in a sharded optimizer), the float32 sum comes out the same
	// but for a float64 rounding error that lands on a float32 rounding
	// boundary, about one step in a million.
	acc := dt
	if normType == 2 && dt == xla.Float32 && d.HasFloat64() {
		acc = xla.Float64
	}
	var total *xla.Tensor
	for _, g := range grads {
		if g.Device() != d {
			return nil, fmt.Errorf("optim: ClipGradNorm: gradients on %s and %s: clip each device's parameters apart", d, g.Device())
		}
		a := g.Cast(acc).Abs()
		var part *xla.Tensor
		switch {
		case math.IsInf(normType, 1):
			part = a.Max()
		case normType == 2:
			part = a.Square().Sum()
		default:
			part = a.PowScalar(normType).Sum()
		}
		switch {
		case total == nil:
			total = part
		case math.IsInf(normType, 1):
			total = total.Maximum(part)
		default:
			total = total.Add(part)
		}
	}
	return total, nil
}
