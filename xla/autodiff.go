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
		if t.node != nil && t.node.op == opStopGradient {
			t.node = &node{op: opLeaf, inputs: []*node{t.node}, shape: t.shape}
		}
	}
	t.requiresGrad = on
	return nil
}

// RequiresGrad reports whether Backward computes t's gradient.
func (t *Tensor) RequiresGrad() bool { return t.requiresGrad }

// Grad returns the accumulated gradient, or nil if none was computed since
// the last ZeroGrad.
func (t *Tensor) Grad() *Tensor {
	t.dev.noteGradRead(t)
	return t.grad
}

// SetGrad replaces the gradient, e.g. with its all-reduced value.
func (t *Tensor) SetGrad(g *Tensor) error {
	if g != nil && !g.shape.Equal(t.shape) && g.err == nil {
		return fmt.Errorf("xla: SetGrad: gradient %s for a %s tensor", g.shape, t.shape)
	}
	t.dev.noteGradSet(t)
	t.grad = g
	return nil
}

// ZeroGrad drops the gradient (torch's set_to_none behaviour).
func (t *Tensor) ZeroGrad() {
	t.dev.noteGradSet(t)
	t.grad = nil
}

// Detach returns t's value cut from the gradient graph (torch's detach):
// no gradient flows through it. Optimizer updates and running statistics
// use it, as torch runs them under no_grad.
func (t *Tensor) Detach() *Tensor {
	if bad := precheck("Detach", t); bad != nil {
		return bad
	}
	return record(opStopGradient, attrs{}, t.shape, t)
}

// Backward records the gradient of the scalar t with respect to every live
// RequiresGrad tensor it depends on, adding to their existing gradients as
// torch does. Nothing runs until MarkStep; the backward pass is GoMLX's
// autodiff of the replayed forward pass.
//
// Reading a value before Backward (loss.Item(), printing an activation)
// runs a MarkStep that materializes the forward pass. Its recipe is kept
// with the buffers for one step, and Backward differentiates through it:
// the next program recomputes that forward pass for the gradients. A
// Backward after a second MarkStep is an error, never a silent zero.
func (t *Tensor) Backward() error {
	if t.err != nil {
		return t.err
	}
	if t.shape.Rank() != 0 || !t.DType().IsFloat() {
		return fmt.Errorf("xla: Backward of %s: needs a float scalar (reduce the loss with Mean or Sum)", t.shape)
	}
	root, err := t.gradientRoot()
	if err != nil {
		return err
	}
	reachable := markDifferentiated(root)
	var updated []*Tensor
	for _, leaf := range t.dev.liveGradLeaves() {
		if !leaf.requiresGrad || leaf.err != nil {
			continue
		}
		leaf.settle()
		wrt := leaf.node
		if wrt == nil {
			wrt = leaf.valueNode()
		}
		if !reachable[wrt] {
			continue
		}
		g := t.dev.newPending(&node{op: opGradient, inputs: []*node{root, wrt}, shape: leaf.shape})
		t.dev.noteGradRead(leaf)
		t.dev.noteGradSet(leaf)
		if leaf.grad != nil {
			g = leaf.grad.Add(g)
		}
		leaf.grad = g
		updated = append(updated, leaf)
	}
	return t.dev.runBackwardHooks(updated)
}

// gradientRoot is the node the loss t's gradients start from: its
// pending node or its materialized value's history, rebuilt for
// differentiation (historyRewriter).
func (t *Tensor) gradientRoot() (*node, error) {
	t.settle()
	var root *node
	switch {
	case t.node != nil:
		root = t.node
	case t.data.history != nil:
		root = t.data.history
	case t.data.historyLost:
		return nil, errLostHistory("the loss")
	default:
		return nil, fmt.Errorf("xla: Backward of a materialized tensor with no gradient path: it does not depend on a RequiresGrad tensor")
	}
	if !root.needsGrad {
		return nil, fmt.Errorf("xla: Backward: the loss does not depend on any RequiresGrad tensor (or was Detached), so it has no gradient")
	}
	rw := &historyRewriter{dev: t.dev, done: map[*node]*node{}}
	root = rw.rewrite(root)
	if rw.err != nil {
		return nil, rw.err
	}
	return root, nil
}

// markDifferentiated marks the nodes a gradient flows through from root
// and returns the nodes reachable through them, leaves included.
func markDifferentiated(root *node) map[*node]bool {
	reachable := map[*node]bool{}
	stack := []*node{root}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if reachable[n] {
			continue
		}
		reachable[n] = true
		if n.needsGrad {
			n.differentiated = true
			stack = append(stack, n.inputs...)
		}
	}
	return reachable
}

func errLostHistory(what string) error {
	return fmt.Errorf("xla: Backward: %s was computed at an earlier MarkStep and its graph is gone (a graph is kept "+
		"one MarkStep, and not after a Backward went through it, as torch frees it); call Backward before the "+
		"MarkStep that follows reading a value", what)
}

// historyRewriter rebuilds a loss graph for differentiation: a buffer read
// as a program input that MarkStep computed from RequiresGrad leaves is
// replaced by its recipe, and every buffer is read through this trace's
// parameter node, so each leaf appears once.
type historyRewriter struct {
	dev  *Device
	done map[*node]*node
	err  error
}

func (rw *historyRewriter) rewrite(root *node) *node {
	type frame struct {
		n        *node
		expanded bool
	}
	stack := []frame{{n: root}}
	for len(stack) > 0 && rw.err == nil {
		top := stack[len(stack)-1]
		if _, ok := rw.done[top.n]; ok {
			stack = stack[:len(stack)-1]
			continue
		}
		n := top.n
		if n.isInput() && n.data.history != n {
			stack = stack[:len(stack)-1]
			rw.rewriteInput(n)
			continue
		}
		if !n.needsGrad {
			rw.done[n] = n
			stack = stack[:len(stack)-1]
			continue
		}
		if !top.expanded {
			stack[len(stack)-1].expanded = true
			for _, in := range n.inputs {
				if _, ok := rw.done[in]; !ok {
					stack = append(stack, frame{n: in})
				}
			}
			continue
		}
		stack = stack[:len(stack)-1]
		inputs := make([]*node, len(n.inputs))
		changed := false
		for i, in := range n.inputs {
			inputs[i] = rw.done[in]
			changed = changed || inputs[i] != in
		}
		if !changed && !n.isInput() {
			rw.done[n] = n
			continue
		}
		// A recipe kept with its buffer is recomputed: the copy reads no buffer.
		c := *n
		c.inputs, c.data = inputs, nil
		rw.done[n] = &c
	}
	return rw.done[root]
}

// rewriteInput maps a node that reads a buffer to the buffer's recipe when
// it has one, else to this trace's parameter node of the buffer.
func (rw *historyRewriter) rewriteInput(n *node) {
	d := n.data
	switch {
	case d.history != nil:
		rw.done[n] = rw.rewrite(d.history)
	case d.historyLost:
		rw.err = errLostHistory("a value it depends on")
		rw.done[n] = n
	default:
		rw.done[n] = rw.dev.parameterNode(d)
	}
}
