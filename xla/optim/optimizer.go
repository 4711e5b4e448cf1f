package optim

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
)

// Optimizer updates parameters from their gradients.
type Optimizer interface {
	// Step records one update of every parameter that has a gradient.
	Step() error
	// ZeroGrad drops every parameter's gradient.
	ZeroGrad()
	// LR returns the learning rate; SetLR changes it (schedulers do).
	LR() float64
	SetLR(lr float64)
	// State returns the optimizer's device state with torch-like names
	// ("step", "state.<i>.momentum_buffer", ...).
	State() []nn.Named
	// Hyperparameters returns the settings, saved as checkpoint metadata.
	Hyperparameters() map[string]float64
}

// ShardedOptimizer is an Optimizer whose State is one replica's shard of
// the job's state (ddp/zero's ZeroRedundancyOptimizer): a file of one
// replica's State would lose the others', so its checkpoints are
// directories it writes and reads itself, every replica its shard;
// ddp/checkpoint's Save and Load hand them to it.
type ShardedOptimizer interface {
	Optimizer
	// StateShard says which shard State holds: replica's of replicas.
	StateShard() (replica, replicas int)
	// SaveSharded writes c into the directory dir, every replica its
	// shard; every replica calls it at the same point.
	SaveSharded(ctx context.Context, dir string, c Checkpoint) error
	// LoadSharded restores c from dir, saved at any replica count.
	LoadSharded(ctx context.Context, dir string, c *Checkpoint) error
}

// base holds what every optimizer shares: the parameters, the learning
// rate and the step count on the device.
type base struct {
	params []*xla.Tensor
	lr     float64
	// lrs hold the learning rate on the device, one scalar per update
	// dtype, always a program input whatever its value: Step reads the
	// tensor, so a scheduler's SetLR never recompiles and also reaches a
	// compiled step (xla.Compile), which does not rerun Step's Go code.
	lrs map[xla.DType]*xla.Tensor
	// lrErr is a failed SetLR upload, returned by the next Step.
	lrErr error
	// step counts Steps as a Float32 scalar on the parameters' device.
	step *xla.Tensor
}

func newBase(params []*xla.Tensor, lr float64) (base, error) {
	if len(params) == 0 {
		return base{}, fmt.Errorf("optim: no parameters to optimize")
	}
	if lr < 0 {
		return base{}, fmt.Errorf("optim: negative learning rate %g", lr)
	}
	for i, p := range params {
		if p == nil {
			return base{}, fmt.Errorf("optim: parameter %d is nil: a layer failed to build (nn.Err(model) says why)", i)
		}
	}
	d := params[0].Device()
	for i, p := range params {
		if p.Device() != d {
			return base{}, fmt.Errorf("optim: parameter %d is on %s, parameter 0 on %s: one optimizer per device", i, p.Device(), d)
		}
		if !p.RequiresGrad() {
			return base{}, fmt.Errorf("optim: parameter %d (%s) does not require gradients", i, p.Shape())
		}
	}
	step, err := xla.FromSlice(d, []float32{0})
	if err != nil {
		return base{}, err
	}
	b := base{params: params, lr: lr, step: step, lrs: map[xla.DType]*xla.Tensor{}}
	for _, p := range params {
		dt := xla.OpMathDType(p.DType())
		if b.lrs[dt] == nil {
			if b.lrs[dt] = d.Hyperparameter(lr, dt); b.lrs[dt].Err() != nil {
				return base{}, b.lrs[dt].Err()
			}
		}
	}
	return b, nil
}

func (b *base) ZeroGrad() {
	for _, p := range b.params {
		p.ZeroGrad()
	}
}

func (b *base) LR() float64 { return b.lr }

// SetLR changes the learning rate the next Step reads.
func (b *base) SetLR(lr float64) {
	b.lr = lr
	for dt, t := range b.lrs {
		if err := t.Assign(t.Device().Hyperparameter(lr, dt)); err != nil && b.lrErr == nil {
			b.lrErr = fmt.Errorf("optim: SetLR(%g): %w", lr, err)
		}
	}
}

// lrFor returns the learning rate in the dtype of p's update arithmetic.
func (b *base) lrFor(p *xla.Tensor) *xla.Tensor { return b.lrs[p.DType()] }

// checkLR returns a failed SetLR's error, once.
func (b *base) checkLR() error {
	err := b.lrErr
	b.lrErr = nil
	return err
}

// zerosLike uploads a zero tensor shaped like each parameter.
func zerosLike(params []*xla.Tensor) ([]*xla.Tensor, error) {
	out := make([]*xla.Tensor, len(params))
	for i, p := range params {
		z, err := xla.FromBytes(p.Device(), p.DType(), p.Dims(), make([]byte, p.Shape().Memory()))
		if err != nil {
			return nil, err
		}
		out[i] = z
	}
	return out, nil
}

// named lists per-parameter state as "state.<i>.<key>".
func named(key string, ts []*xla.Tensor) []nn.Named {
	out := make([]nn.Named, len(ts))
	for i, t := range ts {
		out[i] = nn.Named{Name: fmt.Sprintf("state.%d.%s", i, key), Tensor: t}
	}
	return out
}

// weightDecayed returns grad + wd·p (torch's L2 weight decay).
func weightDecayed(grad, p *xla.Tensor, wd float64) *xla.Tensor {
	if wd == 0 {
		return grad
	}
	return grad.Add(p.MulScalar(wd))
}

// HyperparametersJSON renders an optimizer's settings as JSON (sorted keys), as
// checkpoints store them.
func HyperparametersJSON(o Optimizer) string {
	b, _ := json.Marshal(o.Hyperparameters())
	return string(b)
}

// opmath casts a bfloat16 tensor to float32 for the update arithmetic, as
// torch's optimizers compute bf16 updates in float32 ("opmath"): bf16
// holds 8 significant bits, so 0.999 rounds to 1.0 and 1-β2 to 0, and an
// Adam step computed in bf16 is off by tens of percent. Other dtypes are
// computed as they are.
func opmath(t *xla.Tensor) *xla.Tensor {
	return t.Cast(xla.OpMathDType(t.DType()))
}

// assignAll stores each computed value into its tensor, rounded back to
// the tensor's dtype (state and parameters keep their dtype).
func assignAll(pairs ...[2]*xla.Tensor) error {
	for _, p := range pairs {
		if err := p[0].Assign(p[1].Cast(p[0].DType())); err != nil {
			return err
		}
	}
	return nil
}

// BackwardStep is one training step's tail, torch-xla's
// loss.backward(); xm.optimizer_step(opt); xm.mark_step(): it runs
// loss.Backward() (a data-parallel wrapper averages the gradients there),
// opt.Step() and a MarkStep on the loss's device, and returns the first
// error, including one a tensor carried from an earlier op.
func BackwardStep(ctx context.Context, loss *xla.Tensor, opt Optimizer) error {
	if err := loss.Backward(); err != nil {
		return err
	}
	if err := opt.Step(); err != nil {
		return err
	}
	return loss.Device().MarkStep(ctx)
}
