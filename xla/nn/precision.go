package nn

import (
	"fmt"

	"github.com/xladdp/xladdp/xla"
)

// precision is the dtype a layer runs its matmuls and activations in
// under a mixed-precision policy (SetComputeDType). The zero value
// computes in the parameters' own dtype.
type precision struct{ compute xla.DType }

func (p *precision) setComputeDType(dt xla.DType) { p.compute = dt }

// cast returns t in the compute dtype (t itself without a policy).
func (p *precision) cast(t *xla.Tensor) *xla.Tensor {
	if t == nil || p.compute == xla.InvalidDType || t.DType() == p.compute || t.Err() != nil {
		return t
	}
	return t.Cast(p.compute)
}

// SetComputeDType sets m's mixed-precision policy, torch's autocast for a
// model: Linear, Embedding's users and attention compute in dtype (use
// xla.BFloat16) while the parameters stay in their own dtype (float32
// master weights, so the optimizer state stays float32 too and gradients
// arrive in float32 through the casts). LayerNorm, softmax and the losses
// run in float32 whatever the policy, and the transformer block keeps
// its residual stream in the parameters' dtype: the reductions and the
// long sums are where bf16's 8 significant bits lose a model's accuracy.
// xla.InvalidDType turns the policy off.
func SetComputeDType(m Module, dtype xla.DType) error {
	if dtype != xla.InvalidDType && !dtype.IsFloat() {
		return fmt.Errorf("nn: SetComputeDType(%s): the compute dtype must be a float type (BFloat16, Float32)", dtype)
	}
	walk(m, "", func(_ string, mod Module) {
		if p, ok := mod.(interface{ setComputeDType(xla.DType) }); ok {
			p.setComputeDType(dtype)
		}
	})
	return nil
}
