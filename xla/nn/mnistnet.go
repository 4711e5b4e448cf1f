package nn

import (
	"math/rand/v2"

	"github.com/xladdp/xladdp/xla"
)

// NewMNISTNet is the PyTorch MNIST example's CNN (the smdistributed
// example's Net): conv 1→32 and 32→64 (3×3), ReLU, 2×2 max-pool, dropout
// 0.25, fc 9216→128, ReLU, dropout 0.5, fc 128→10. It returns logits;
// take LogSoftmax(1) for the example's log-probabilities.
func NewMNISTNet(d *xla.Device, rng *rand.Rand) (*Sequential, error) {
	conv1, err := NewConv2d(d, rng, Conv2dConfig{In: 1, Out: 32, Kernel: 3, Bias: true})
	if err != nil {
		return nil, err
	}
	conv2, err := NewConv2d(d, rng, Conv2dConfig{In: 32, Out: 64, Kernel: 3, Bias: true})
	if err != nil {
		return nil, err
	}
	drop1, err := NewDropout(0.25)
	if err != nil {
		return nil, err
	}
	drop2, err := NewDropout(0.5)
	if err != nil {
		return nil, err
	}
	pool, err := NewMaxPool2d(2, 2, 0)
	if err != nil {
		return nil, err
	}
	fc1, fc2 := Dense(d, rng, 9216, 128), Dense(d, rng, 128, 10)
	net := NewSequential(conv1, ReLU{}, conv2, ReLU{}, pool, drop1, Flatten{}, fc1, ReLU{}, drop2, fc2)
	return net, Err(net)
}
