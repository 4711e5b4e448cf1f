package xla

import (
	"fmt"
	"weak"
)

// SetRequiresGrad marks t as a leaf whose gradient Backward computes, like
// torch's requires_grad_. Only float tensors can require gradients.
func (t *Tensor) SetRequiresGrad(on bool) error {
	if on && !t.DType().IsFloat() {
		return fmt.Errorf("xla: SetRequiresGrad on %s: only float tensors have gradients", t.shape)
	}
	if on && !t.requiresGrad {
		t.dev.gradLeaves = append(t.dev.gradLeaves, weak.Make(t))
	}
	t.requiresGrad = on
	return nil
}

// RequiresGrad reports whether Backward computes t's gradient.
func (t *Tensor) RequiresGrad() bool { return t.requiresGrad }

// Grad returns the accumulated gradient, or nil if none was computed since
// the last ZeroGrad.
func (t *Tensor) Grad() *Tensor { return t.grad }

// SetGrad replaces the gradient, e.g. with its all-reduced value.
func (t *Tensor) SetGrad(g *Tensor) error {
	if g != nil && !g.shape.Equal(t.shape) && g.err == nil {
		return fmt.Errorf("xla: SetGrad: gradient %s for a %s tensor", g.shape, t.shape)
	}
	t.grad = g
	return nil
}

// ZeroGrad drops the gradient (torch's set_to_none behaviour).
func (t *Tensor) ZeroGrad() { t.grad = nil }

// Backward records the gradient of the scalar t with respect to every live
// RequiresGrad tensor it depends on, adding to their existing gradients as
// torch does. Nothing runs until MarkStep; the backward pass is GoMLX's
// autodiff of the replayed forward pass.
func (t *Tensor) Backward() error {
	if t.err != nil {
		return t.err
	}
	if t.shape.Rank() != 0 || !t.DType().IsFloat() {
		return fmt.Errorf("xla: Backward of %s: needs a float scalar (reduce the loss with Mean or Sum)", t.shape)
	}
	if t.node == nil {
		return fmt.Errorf("xla: Backward of a materialized tensor: it has no trace to differentiate (call Backward before MarkStep)")
	}
	reachable := map[*node]bool{}
	stack := []*node{t.node}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if reachable[n] {
			continue
		}
		reachable[n] = true
		stack = append(stack, n.inputs...)
	}
	for _, leaf := range t.dev.liveGradLeaves() {
		if !leaf.requiresGrad || leaf.err != nil {
			continue
		}
		wrt := leaf.node
		if wrt == nil {
			wrt = leaf.data.paramNode
			if leaf.data.paramEpoch != t.dev.epoch() {
				wrt = nil
			}
		}
		if wrt == nil || !reachable[wrt] {
			continue
		}
		g := t.dev.newPending(&node{op: opGradient, inputs: []*node{t.node, wrt}, shape: leaf.shape})
		if leaf.grad != nil {
			g = leaf.grad.Add(g)
		}
		leaf.grad = g
	}
	return nil
}
