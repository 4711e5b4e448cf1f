package xla

import (
	"context"
	"fmt"
)

// capture is what a device notes while a compiled step traces.
type capture struct {
	args []*Tensor
	// start names the tensors known at the call's start by their buffer.
	start map[*deviceData]ref
	// sources are the buffers read through tensors fn reached.
	sources map[*deviceData]ref
	// created are tensors made from host values during the trace;
	// assigned are tensors fn assigned a buffer to.
	created  map[*Tensor]bool
	assigned map[*Tensor]bool
	// aliases are tensors To made for the same device: reads through
	// them are reads of the original.
	aliases map[*Tensor]*Tensor
	// unnamed is a buffer read only through a tensor fn reassigned.
	unnamed  *deviceData
	rngStart *Tensor
	grads    map[*Tensor]*Tensor
	// gradSeen are the leaves whose gradient fn looked at before setting
	// it (gradSet): the plan's guard.
	gradSeen map[*Tensor]bool
	gradSet  map[*Tensor]bool
	// finishing is set once fn returned and its MarkStep runs; trace and
	// program are what that MarkStep ran.
	finishing bool
	trace     *trace
	program   *program
}

// noteRead records where a buffer read as a program input comes from.
func (c *capture) noteRead(t *Tensor) {
	for c.aliases[t] != nil && c.aliases[t].data == t.data {
		t = c.aliases[t]
	}
	dd := t.data
	if _, ok := c.sources[dd]; ok {
		return
	}
	if src, ok := c.start[dd]; ok {
		c.sources[dd] = src
		return
	}
	switch {
	case c.created[t]:
	case c.assigned[t]:
		if c.unnamed == nil {
			c.unnamed = dd
		}
	default:
		c.sources[dd] = ref{kind: refHandle, t: t}
	}
}

func (c *capture) tracing() bool { return !c.finishing }

// noteGradRead records that fn looked at leaf's gradient; noteGradSet
// that it replaced it.
func (c *capture) noteGradRead(leaf *Tensor) {
	if !c.gradSet[leaf] {
		c.gradSeen[leaf] = true
	}
}

func (c *capture) noteGradSet(leaf *Tensor)   { c.gradSet[leaf] = true }
func (c *capture) noteCreated(t *Tensor)      { c.created[t] = true }
func (c *capture) noteAssigned(t *Tensor)     { c.assigned[t] = true }
func (c *capture) noteAlias(copy, of *Tensor) { c.aliases[copy] = of }

func (c *capture) stepRan(tr *trace, p *program) {
	if c.finishing {
		c.trace, c.program = tr, p
	}
}

// stepAliases are the donation pairs of the step's own MarkStep.
func (c *capture) stepAliases(d *Device, tr *trace) []int {
	if !c.finishing {
		return nil
	}
	return c.aliasPairs(d, tr)
}

// trace runs fn on d as in lazy mode, runs its MarkStep, and makes the plan.
func (s *CompiledStep) trace(ctx context.Context, d *Device, args []*Tensor) (*stepPlan, []*Tensor, error) {
	c := newCapture(d, args)
	results, err := s.runTraced(d, c, args)
	if err != nil {
		return nil, nil, err
	}
	returned, retNodes := pendingResults(d, results)
	slots := c.slotChanges(d)
	c.finishing = true
	d.observer = c
	err = d.MarkStep(ctx)
	d.observer = lazyMode{}
	tr, prog := c.trace, c.program
	if err != nil {
		return nil, nil, err
	}
	if c.unnamed != nil {
		if _, ok := c.sources[c.unnamed]; !ok {
			return nil, nil, fmt.Errorf("xla: Compile: the step on %s reads a %s buffer only through a tensor it assigned that "+
				"buffer to; assign it before the step or pass it as an argument", d, c.unnamed.shape)
		}
	}
	plan := &stepPlan{device: d, program: prog, slots: slots, returns: make([]int, len(retNodes))}
	for leaf := range c.gradSeen {
		plan.guard = append(plan.guard, gradPresence{leaf: leaf, present: c.grads[leaf] != nil})
	}
	if tr == nil {
		// Nothing ran: every result is pending (runTraced detaches
		// materialized ones), so there are none either.
		return plan, returned, nil
	}
	plan.wire(c, tr, retNodes, returned)
	return plan, returned, nil
}

// newCapture starts a capture on d, naming the buffers known at the
// call's start: the arguments', the RNG state's and the gradients'.
func newCapture(d *Device, args []*Tensor) *capture {
	c := &capture{args: args, start: map[*deviceData]ref{}, sources: map[*deviceData]ref{},
		created: map[*Tensor]bool{}, assigned: map[*Tensor]bool{}, aliases: map[*Tensor]*Tensor{}, rngStart: d.rng, grads: map[*Tensor]*Tensor{},
		gradSeen: map[*Tensor]bool{}, gradSet: map[*Tensor]bool{}}
	for i, a := range args {
		if _, dup := c.start[a.data]; !dup {
			c.start[a.data] = ref{kind: refArg, arg: i}
		}
	}
	if d.rng.data != nil {
		c.start[d.rng.data] = ref{kind: refRNG}
	}
	for _, l := range d.liveGradLeaves() {
		c.grads[l] = l.grad
		if l.grad == nil {
			continue
		}
		l.grad.settle()
		if l.grad.data != nil && l.grad.node == nil {
			if _, dup := c.start[l.grad.data]; !dup {
				c.start[l.grad.data] = ref{kind: refGrad, leaf: l}
			}
		}
	}
	return c
}

// pendingResults moves the step's results to fresh handles, so a result
// fn does not keep is not mistaken for state it updates in place, and
// returns them with their nodes; it clears results.
func pendingResults(d *Device, results []*Tensor) (returned []*Tensor, retNodes []*node) {
	returned = make([]*Tensor, len(results))
	retNodes = make([]*node, len(results))
	for i, r := range results {
		returned[i] = d.newPending(r.node)
		retNodes[i] = r.node
	}
	clear(results)
	return returned, retNodes
}

// wire fills in where the plan's results, writes and inputs come from in
// the trace tr of its MarkStep.
func (plan *stepPlan) wire(c *capture, tr *trace, retNodes []*node, returned []*Tensor) {
	outIndex := make(map[*node]int, len(tr.outputs))
	for j, o := range tr.outputs {
		outIndex[o] = j
	}
	for i, n := range retNodes {
		plan.returns[i] = outIndex[n]
	}
	plan.writes = c.writeTargets(plan.device, tr, returned)
	plan.inputs = make([]planInput, len(tr.params))
	for i, pn := range tr.params {
		in := planInput{shape: pn.shape}
		if src, ok := c.sources[pn.data]; ok {
			in.from = src
		} else {
			in.constant = pn.data
		}
		plan.inputs[i] = in
	}
}

// runTraced runs fn with d capturing; every result becomes a pending value
// (a materialized one through Detach), so it is a program output.
func (s *CompiledStep) runTraced(d *Device, c *capture, args []*Tensor) (results []*Tensor, err error) {
	d.observer = c
	defer func() { d.observer = lazyMode{} }()
	results, err = s.fn(args...)
	if err != nil {
		return nil, err
	}
	for i, r := range results {
		if r == nil {
			return nil, fmt.Errorf("xla: Compile: the step returned a nil tensor as result %d", i)
		}
		if r.err != nil {
			return nil, r.err
		}
		if r.dev != d {
			return nil, fmt.Errorf("xla: Compile: the step on %s returned result %d on %s", d, i, r.dev)
		}
		r.settle()
		if r.node == nil {
			results[i] = r.Detach()
		}
	}
	return results, nil
}

// aliasPairs says, per parameter of the step's trace, which output its
// buffer may be donated to: the output written to the tensor (or RNG or
// gradient slot) the parameter was read from, with the same shape; -1
// for none. Each output takes at most one parameter.
func (c *capture) aliasPairs(d *Device, tr *trace) []int {
	outputOf := map[*Tensor]int{}
	index := make(map[*node]int, len(tr.outputs))
	for j, o := range tr.outputs {
		index[o] = j
	}
	for _, h := range tr.handles {
		if j, ok := index[h.node]; ok {
			outputOf[h] = j
		}
	}
	aliases := make([]int, len(tr.params))
	taken := map[int]bool{}
	for i, pn := range tr.params {
		aliases[i] = -1
		src, ok := c.sources[pn.data]
		if !ok {
			continue
		}
		var writer *Tensor
		switch src.kind {
		case refArg:
			writer = c.args[src.arg]
		case refHandle:
			writer = src.t
		case refRNG:
			writer = d.rng
		case refGrad:
			writer = src.leaf.grad
		}
		if j, ok := outputOf[writer]; ok && writer != nil && !taken[j] && tr.outputs[j].shape.Equal(pn.shape) {
			aliases[i], taken[j] = j, true
		}
	}
	return aliases
}

// slotChanges lists the RNG and gradient pointers fn changed.
func (c *capture) slotChanges(d *Device) []slotUpdate {
	var out []slotUpdate
	if d.rng != c.rngStart {
		out = append(out, slotUpdate{end: d.rng})
	}
	for _, l := range d.liveGradLeaves() {
		if start, ok := c.grads[l]; !ok && l.grad != nil || ok && start != l.grad {
			out = append(out, slotUpdate{leaf: l, end: l.grad})
		}
	}
	return out
}

// writeTargets names, per output, the live tensors that hold it after the
// trace, except the fresh result handles.
func (c *capture) writeTargets(d *Device, tr *trace, returned []*Tensor) [][]ref {
	isReturned := map[*Tensor]bool{}
	for _, r := range returned {
		isReturned[r] = true
	}
	argAt := map[*Tensor]int{}
	for i, a := range c.args {
		argAt[a] = i
	}
	outIndex := make(map[*deviceData]int, len(tr.outputs))
	for j, o := range tr.outputs {
		outIndex[o.data] = j
	}
	writes := make([][]ref, len(tr.outputs))
	for _, h := range tr.handles {
		j, ok := outIndex[h.data]
		if !ok || isReturned[h] {
			continue
		}
		r := ref{kind: refHandle, t: h}
		if i, isArg := argAt[h]; isArg {
			r = ref{kind: refArg, arg: i}
		} else if h == c.rngStart {
			r = ref{kind: refRNG}
		}
		writes[j] = append(writes[j], r)
	}
	return writes
}
