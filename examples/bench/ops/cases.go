package main

import (
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
)

// input is one operand of a case: its shape at batch b, whether the case
// differentiates it, and whether it holds class labels (int32 in [0, 10))
// instead of N(0, 1) values.
type input struct {
	dims   func(b int) []int
	grad   bool
	labels bool
}

func batched(grad bool, dims ...int) input {
	return input{dims: func(b int) []int { return append([]int{b}, dims...) }, grad: grad}
}

func fixed(grad bool, dims ...int) input {
	return input{dims: func(int) []int { return dims }, grad: grad}
}

// opCase is one row of the per-op table: the MNIST CNN's layers at the
// seed's shapes. Its loss is sum(apply(inputs) * cotangent) (or apply's
// scalar itself); the forward row times that loss alone, the backward row
// the loss and the gradients of the inputs marked grad.
// examples/bench/peers/ops_jax.py and ops_torch.py mirror the table.
type opCase struct {
	name   string
	inputs []input
	apply  func(in []*xla.Tensor) *xla.Tensor
}

func convBias(in []*xla.Tensor) *xla.Tensor {
	out := xla.Conv2d(in[0], in[1], xla.Conv2dOptions{})
	return out.Add(in[2].Reshape(1, -1, 1, 1))
}

func linear(in []*xla.Tensor) *xla.Tensor { return in[0].MatMul(in[1]).Add(in[2]) }

var cases = []opCase{
	{"conv1 1->32 3x3 on 28x28 (dW)", []input{batched(false, 1, 28, 28), fixed(true, 32, 1, 3, 3), fixed(true, 32)}, convBias},
	{"conv2 32->64 3x3 on 26x26 (dX, dW)", []input{batched(true, 32, 26, 26), fixed(true, 64, 32, 3, 3), fixed(true, 64)}, convBias},
	{"conv2 32->64 3x3 on 26x26 (dX)", []input{batched(true, 32, 26, 26), fixed(false, 64, 32, 3, 3), fixed(false, 64)}, convBias},
	{"conv2 32->64 3x3 on 26x26 (dW)", []input{batched(false, 32, 26, 26), fixed(true, 64, 32, 3, 3), fixed(true, 64)}, convBias},
	{"relu on 64x24x24", []input{batched(true, 64, 24, 24)}, func(in []*xla.Tensor) *xla.Tensor { return in[0].Relu() }},
	{"max_pool2d 2x2 on 64x24x24", []input{batched(true, 64, 24, 24)}, func(in []*xla.Tensor) *xla.Tensor {
		return xla.MaxPool2d(in[0], xla.Pool2dOptions{Kernel: [2]int{2, 2}})
	}},
	{"dropout 0.25 on 64x12x12", []input{batched(true, 64, 12, 12)}, func(in []*xla.Tensor) *xla.Tensor {
		d, err := nn.NewDropout(0.25)
		if err != nil {
			panic(err) // a constant probability in [0, 1)
		}
		return d.Forward(in[0])
	}},
	{"linear 9216->128", []input{batched(true, 9216), fixed(true, 9216, 128), fixed(true, 128)}, linear},
	{"linear 128->10", []input{batched(true, 128), fixed(true, 128, 10), fixed(true, 10)}, linear},
	{"log_softmax+nll over 10", []input{batched(true, 10), {dims: func(b int) []int { return []int{b} }, labels: true}},
		func(in []*xla.Tensor) *xla.Tensor { return nn.NLLLoss(in[0].LogSoftmax(1), in[1], nn.ReductionMean) }},
}

// adadeltaName is the optimizer row: one Adadelta update (lr 1) of the
// MNIST CNN's parameters from fixed gradients.
const adadeltaName = "adadelta update, MNIST CNN params"

// cnnParamDims are the MNIST CNN's parameter shapes (torch's order).
var cnnParamDims = [][]int{{32, 1, 3, 3}, {32}, {64, 32, 3, 3}, {64}, {128, 9216}, {128}, {10, 128}, {10}}
