package ddp

import (
	"errors"
	"fmt"

	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
)

// WrapOptions configures Wrap.
type WrapOptions struct {
	// FindUnusedParameters is torch's find_unused_parameters: a parameter
	// that got no gradient in a Backward still takes part in the
	// averaging, with a zero gradient, so replicas whose steps use
	// different layers stay in step.
	FindUnusedParameters bool
}

// DistributedDataParallel is a module whose gradients are averaged over
// every replica after each Backward, as torch's DistributedDataParallel
// does: the training loop is the single-device one.
type DistributedDataParallel struct {
	module  nn.Module
	opts    WrapOptions
	dev     *xla.Device
	params  []*xla.Tensor
	buffers []*xla.Tensor
	noSync  bool
	unhook  func()
}

// ErrAcrossProcesses: Wrap was called in a job whose default process group
// has more than one process, which this version does not average over yet.
var ErrAcrossProcesses = errors.New("ddp: Wrap averages over the local replicas only; the cross-process path is not built yet")

// Wrap returns module wrapped for data-parallel training over the local
// replicas (xla.Engine.RunReplicas; one device alone is a group of one).
// Every replica calls Wrap on its own copy of the model, on its device:
//   - the parameters and buffers are broadcast from replica 0 (recorded
//     now, run with the next MarkStep), so every replica starts equal even
//     if they were initialized differently;
//   - after each Backward, every gradient of the module is replaced by its
//     mean over the replicas, in-graph (an XLA all-reduce over the device
//     collectives), unless inside NoSync;
//   - at each Forward, the buffers (BatchNorm's running statistics) are
//     broadcast from replica 0 first, as torch's broadcast_buffers does.
//
// All of the module's tensors must be on one device. Close removes the
// gradient hook.
func Wrap(module nn.Module, opts WrapOptions) (*DistributedDataParallel, error) {
	if module == nil {
		return nil, errors.New("ddp: Wrap of a nil module")
	}
	if g := Default(); g != nil && g.WorldSize() > 1 {
		return nil, fmt.Errorf("%w (the default process group has %d ranks)", ErrAcrossProcesses, g.WorldSize())
	}
	m := &DistributedDataParallel{module: module, opts: opts}
	params, buffers := nn.NamedParameters(module), nn.NamedBuffers(module)
	named := append(params, buffers...)
	for i, n := range named {
		if n.Tensor == nil {
			return nil, fmt.Errorf("ddp: Wrap: %s is nil", n.Name)
		}
		switch {
		case m.dev == nil:
			m.dev = n.Tensor.Device()
		case n.Tensor.Device() != m.dev:
			return nil, fmt.Errorf("ddp: Wrap: %s is on %s but %s is on %s: move the module to one device first",
				n.Name, n.Tensor.Device(), named[0].Name, m.dev)
		}
		if i < len(params) {
			m.params = append(m.params, n.Tensor)
		} else {
			m.buffers = append(m.buffers, n.Tensor)
		}
	}
	if m.dev == nil {
		return nil, errors.New("ddp: Wrap: the module has no parameters or buffers to keep in step")
	}
	for _, n := range named {
		if err := n.Tensor.Assign(xla.Broadcast(n.Tensor.Detach(), 0)); err != nil {
			return nil, fmt.Errorf("ddp: Wrap: broadcasting %s from replica 0: %w", n.Name, err)
		}
	}
	m.unhook = m.dev.RegisterBackwardHook(m.averageGradients)
	return m, nil
}

// averageGradients is the backward hook: each of the module's gradients
// becomes its mean over the replicas.
func (m *DistributedDataParallel) averageGradients([]*xla.Tensor) error {
	if m.noSync {
		return nil
	}
	for _, p := range m.params {
		g := p.Grad()
		if g == nil {
			if !m.opts.FindUnusedParameters {
				continue
			}
			g = m.dev.Zeros(p.DType(), p.Dims()...)
		}
		if err := p.SetGrad(xla.AllReduce(g, xla.ReduceMean)); err != nil {
			return err
		}
	}
	return nil
}

// Forward broadcasts the buffers from replica 0, then runs the wrapped
// module.
func (m *DistributedDataParallel) Forward(x *xla.Tensor) *xla.Tensor {
	for _, b := range m.buffers {
		if err := b.Assign(xla.Broadcast(b, 0)); err != nil {
			return xla.Failed(x, fmt.Errorf("ddp: broadcasting a buffer from replica 0: %w", err))
		}
	}
	return m.module.Forward(x)
}

// NoSync runs fn with gradient averaging off, torch's no_sync(): the
// Backwards inside accumulate local gradients, and the first Backward
// after it averages the accumulated sum.
func (m *DistributedDataParallel) NoSync(fn func() error) error {
	m.noSync = true
	defer func() { m.noSync = false }()
	return fn()
}

// Module returns the wrapped module (torch's ddp_model.module).
func (m *DistributedDataParallel) Module() nn.Module { return m.module }

// Params, Buffers and Children present the wrapped module's tensors under
// their own names (no "module." prefix), so state dicts and optimizers see
// the inner module.
func (m *DistributedDataParallel) Params() []nn.Named         { return m.module.Params() }
func (m *DistributedDataParallel) Buffers() []nn.Named        { return m.module.Buffers() }
func (m *DistributedDataParallel) Children() []nn.NamedModule { return m.module.Children() }

// Close stops averaging: the module trains locally from then on.
func (m *DistributedDataParallel) Close() { m.unhook() }
