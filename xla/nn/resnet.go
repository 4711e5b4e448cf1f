package nn

import (
	"fmt"
	"math/rand/v2"

	"github.com/xladdp/xladdp/xla"
)

// BasicBlock is torchvision's ResNet basic block: two 3×3 convolutions with
// batch norm and a residual connection, downsampled by a 1×1 convolution
// when the stride or width changes.
type BasicBlock struct {
	Conv1, Conv2 *Conv2d
	BN1, BN2     *BatchNorm2d
	Downsample   *Sequential // nil when the shapes already match
}

func newBasicBlock(d *xla.Device, rng *rand.Rand, in, out, stride int) (*BasicBlock, error) {
	var err error
	blk := &BasicBlock{}
	if blk.Conv1, err = newConv2d(d, rng, Conv2dConfig{In: in, Out: out, Kernel: 3, Stride: stride, Padding: 1}, true); err != nil {
		return nil, err
	}
	if blk.BN1, err = NewBatchNorm2d(d, out); err != nil {
		return nil, err
	}
	if blk.Conv2, err = newConv2d(d, rng, Conv2dConfig{In: out, Out: out, Kernel: 3, Padding: 1}, true); err != nil {
		return nil, err
	}
	if blk.BN2, err = NewBatchNorm2d(d, out); err != nil {
		return nil, err
	}
	if stride != 1 || in != out {
		conv, err := newConv2d(d, rng, Conv2dConfig{In: in, Out: out, Kernel: 1, Stride: stride}, true)
		if err != nil {
			return nil, err
		}
		bn, err := NewBatchNorm2d(d, out)
		if err != nil {
			return nil, err
		}
		blk.Downsample = NewSequential(conv, bn)
	}
	return blk, nil
}

// Forward applies the block.
func (b *BasicBlock) Forward(x *xla.Tensor) *xla.Tensor {
	out := b.BN1.Forward(b.Conv1.Forward(x)).Relu()
	out = b.BN2.Forward(b.Conv2.Forward(out))
	identity := x
	if b.Downsample != nil {
		identity = b.Downsample.Forward(x)
	}
	return out.Add(identity).Relu()
}

// Params returns none (the children own them).
func (b *BasicBlock) Params() []Named { return nil }

// Buffers returns none.
func (b *BasicBlock) Buffers() []Named { return nil }

// Children returns conv1, bn1, conv2, bn2 and downsample, as torchvision.
func (b *BasicBlock) Children() []NamedModule {
	c := []NamedModule{{"conv1", b.Conv1}, {"bn1", b.BN1}, {"conv2", b.Conv2}, {"bn2", b.BN2}}
	if b.Downsample != nil {
		c = append(c, NamedModule{"downsample", b.Downsample})
	}
	return c
}

// ResNetConfig chooses the classifier size and the stem.
type ResNetConfig struct {
	NumClasses int // 1000 for ImageNet
	// CIFAR uses a 3×3 stride-1 stem without max-pool, for 32×32 images.
	CIFAR bool
}

// ResNet is torchvision's ResNet-18 (parameter names included).
type ResNet struct {
	Conv1                          *Conv2d
	BN1                            *BatchNorm2d
	MaxPool                        *MaxPool2d // nil in the CIFAR variant
	Layer1, Layer2, Layer3, Layer4 *Sequential
	AvgPool                        *AdaptiveAvgPool2d
	FC                             *Linear
}

// NewResNet18 builds ResNet-18 on d, initialised like torchvision
// (kaiming-normal fan-out convolutions, BatchNorm weight 1 and bias 0,
// default Linear).
func NewResNet18(d *xla.Device, rng *rand.Rand, cfg ResNetConfig) (*ResNet, error) {
	if cfg.NumClasses < 1 {
		return nil, fmt.Errorf("nn: ResNet-18 with %d classes: need at least 1", cfg.NumClasses)
	}
	stem := Conv2dConfig{In: 3, Out: 64, Kernel: 7, Stride: 2, Padding: 3}
	if cfg.CIFAR {
		stem = Conv2dConfig{In: 3, Out: 64, Kernel: 3, Stride: 1, Padding: 1}
	}
	var err error
	r := &ResNet{AvgPool: &AdaptiveAvgPool2d{Height: 1, Width: 1}}
	if r.Conv1, err = newConv2d(d, rng, stem, true); err != nil {
		return nil, err
	}
	if r.BN1, err = NewBatchNorm2d(d, 64); err != nil {
		return nil, err
	}
	if !cfg.CIFAR {
		if r.MaxPool, err = NewMaxPool2d(3, 2, 1); err != nil {
			return nil, err
		}
	}
	in := 64
	for i, layer := range []**Sequential{&r.Layer1, &r.Layer2, &r.Layer3, &r.Layer4} {
		out, stride := 64<<i, 2
		if i == 0 {
			stride = 1
		}
		first, err := newBasicBlock(d, rng, in, out, stride)
		if err != nil {
			return nil, err
		}
		second, err := newBasicBlock(d, rng, out, out, 1)
		if err != nil {
			return nil, err
		}
		*layer = NewSequential(first, second)
		in = out
	}
	if r.FC, err = NewLinear(d, rng, 512, cfg.NumClasses, true); err != nil {
		return nil, err
	}
	return r, nil
}

// Forward maps images [N, 3, H, W] to logits [N, NumClasses].
func (r *ResNet) Forward(x *xla.Tensor) *xla.Tensor {
	x = r.BN1.Forward(r.Conv1.Forward(x)).Relu()
	if r.MaxPool != nil {
		x = r.MaxPool.Forward(x)
	}
	for _, layer := range []*Sequential{r.Layer1, r.Layer2, r.Layer3, r.Layer4} {
		x = layer.Forward(x)
	}
	return r.FC.Forward(r.AvgPool.Forward(x).Flatten())
}

// Params returns none (the children own them).
func (r *ResNet) Params() []Named { return nil }

// Buffers returns none.
func (r *ResNet) Buffers() []Named { return nil }

// Children returns the submodules with torchvision's names.
func (r *ResNet) Children() []NamedModule {
	return []NamedModule{{"conv1", r.Conv1}, {"bn1", r.BN1}, {"layer1", r.Layer1}, {"layer2", r.Layer2},
		{"layer3", r.Layer3}, {"layer4", r.Layer4}, {"fc", r.FC}}
}
