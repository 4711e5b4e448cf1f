package nn

import (
	"fmt"

	"github.com/xladdp/xladdp/xla"
)

// Reduction says how a loss combines per-element losses.
type Reduction int

const (
	ReductionMean Reduction = iota // torch's default
	ReductionSum
	ReductionNone
)

func reduce(loss *xla.Tensor, r Reduction) *xla.Tensor {
	switch r {
	case ReductionSum:
		return loss.Sum()
	case ReductionNone:
		return loss
	}
	return loss.Mean()
}

// MSELoss is the squared error between pred and target (same shape).
func MSELoss(pred, target *xla.Tensor, r Reduction) *xla.Tensor {
	return reduce(pred.Sub(target).Square(), r)
}

// NLLLoss is -logp[i, labels[i]] for log-probabilities logp [N, C] and
// integer labels [N].
func NLLLoss(logp, labels *xla.Tensor, r Reduction) *xla.Tensor {
	if logp.Err() == nil && labels.Err() == nil && (logp.Rank() != 2 || labels.Rank() != 1 || labels.Dims()[0] != logp.Dims()[0]) {
		return xla.Failed(logp, fmt.Errorf("nn: NLLLoss: needs logp [N, C] and labels [N], got %s and %s", logp.Shape(), labels.Shape()))
	}
	picked := logp.TakeAlongAxis(labels.Reshape(-1, 1), 1).Reshape(-1)
	return reduce(picked.Neg(), r)
}

// CrossEntropyLoss is NLLLoss of LogSoftmax(logits, 1), in float32 for
// bfloat16 logits (as autocast runs it): logits [N, C],
// integer labels [N].
func CrossEntropyLoss(logits, labels *xla.Tensor, r Reduction) *xla.Tensor {
	return NLLLoss(logits.Cast(xla.OpMathDType(logits.DType())).LogSoftmax(1), labels, r)
}
