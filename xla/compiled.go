package xla

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"

	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// StepFunc is a training or inference step for Compile: it records ops on
// its arguments and on the tensors it reaches (parameters, optimizer state,
// the device RNG) and returns the values the caller wants.
type StepFunc func(args ...*Tensor) ([]*Tensor, error)

// CompiledStep is a step function traced once per input signature and then
// run from its compiled program without running the Go function again, as
// jax.jit and torch_xla.compile do. See Compile.
type CompiledStep struct {
	fn StepFunc
	mu sync.Mutex
	// plans holds, per device and group, the traced plans by signature.
	plans map[planPlace]map[string][]*stepPlan
}

// planPlace is where a plan runs: its device, in its group (a replica's
// position decides the per-replica inputs baked into its plan).
type planPlace struct {
	device *Device
	group  *group
}

// maxPlansPerDevice bounds the traced signatures kept per device, and
// maxGuardVariants the plans per signature that differ in which gradients
// existed: a step called with ever-changing shapes retraces, never grows
// without bound.
const (
	maxPlansPerDevice = 64
	maxGuardVariants  = 8
)

// Compile returns fn as a compiled step. The first Run with a signature
// (the arguments' shapes and dtypes, the replica group, and whether each
// gradient fn looks at before replacing it exists) runs fn once as in
// lazy mode and records
// what it did: which buffers the program reads and from where (an
// argument, a tensor fn reached, the device RNG, a gradient), and which
// tensors it left holding results. Later Runs with that signature run the
// program directly on the current buffers and update those tensors in
// place: parameters and optimizer state change as fn would change them,
// the RNG advances, gradients are set, and under RunReplicas the replicas
// meet and run one SPMD program with its collectives, as at MarkStep.
//
// fn must do the same thing on every call, as under jax.jit: Go values it
// reads (a learning rate in a Go variable, a step counter, a branch on
// whether state exists yet) are frozen at the trace; hold what changes in
// a tensor (the optimizers keep their learning rate on the device, so
// SetLR works) or pass it as an argument. Tensors fn creates from host
// values (FromSlice, Hyperparameter) are constants of the step. fn must
// not read values (Item, ToHost, MarkStep): that is an error during the
// trace. A tensor fn replaces in a Go structure instead of assigning it
// is not followed; Assign it instead, as torch's in-place updates do.
func Compile(fn StepFunc) *CompiledStep {
	return &CompiledStep{fn: fn, plans: map[planPlace]map[string][]*stepPlan{}}
}

// Run runs the step on device d with args, all on d. Pending lazy work on
// d is run first (a MarkStep), as torch_xla.compile does. It returns fn's
// results, materialized or in flight (reading them waits). Called while
// another compiled step traces on d, fn runs inline in that trace.
func (s *CompiledStep) Run(ctx context.Context, d *Device, args ...*Tensor) ([]*Tensor, error) {
	if d == nil {
		return nil, errors.New("xla: CompiledStep.Run: nil device")
	}
	for i, a := range args {
		if a == nil {
			return nil, fmt.Errorf("xla: CompiledStep.Run: argument %d is nil", i)
		}
		if a.err != nil {
			return nil, fmt.Errorf("xla: CompiledStep.Run: argument %d: %w", i, a.err)
		}
		if a.dev != d {
			return nil, fmt.Errorf("xla: CompiledStep.Run on %s: argument %d is on %s; copy it with Tensor.To", d, i, a.dev)
		}
	}
	if d.capture != nil {
		return s.fn(args...)
	}
	if len(d.pending) > 0 {
		if err := d.MarkStep(ctx); err != nil {
			return nil, err
		}
	}
	for i, a := range args {
		if err := a.materialize(ctx); err != nil {
			return nil, fmt.Errorf("xla: CompiledStep.Run: argument %d: %w", i, err)
		}
	}
	g := d.currentGroup()
	place := planPlace{device: d, group: g}
	sig := signature(args)
	s.mu.Lock()
	var plan *stepPlan
	for _, p := range s.plans[place][string(sig)] {
		if p.guardHolds() {
			plan = p
			break
		}
	}
	s.mu.Unlock()
	stale := plan
	if plan != nil {
		outs, err, ok := plan.replay(ctx, g, args)
		if ok {
			return outs, err
		}
	}
	plan, outs, err := s.trace(ctx, d, args)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	// A device is in one group at a time, and a group that ended never
	// meets again: its plans (and the tensors they hold) go.
	for other := range s.plans {
		if other.device == d && other.group != g {
			delete(s.plans, other)
		}
	}
	byPlace := s.plans[place]
	if byPlace == nil || len(byPlace) >= maxPlansPerDevice {
		byPlace = map[string][]*stepPlan{}
		s.plans[place] = byPlace
	}
	// A plan whose inputs no longer fit is replaced, not kept first in line.
	variants := slices.DeleteFunc(byPlace[string(sig)], func(p *stepPlan) bool { return p == stale })
	if len(variants) >= maxGuardVariants {
		variants = nil
	}
	byPlace[string(sig)] = append(variants, plan)
	s.mu.Unlock()
	metrics.stepTraced()
	return outs, nil
}

// signature is what decides a plan besides its place and its gradient
// guard: the arguments' shapes.
func signature(args []*Tensor) []byte {
	b := make([]byte, 0, 64)
	for _, a := range args {
		b = binary.AppendUvarint(b, uint64(a.shape.DType))
		b = binary.AppendUvarint(b, uint64(a.shape.Rank()))
		for _, dim := range a.shape.Dimensions {
			b = binary.AppendUvarint(b, uint64(dim))
		}
	}
	return b
}

// ref names a tensor a plan reads or writes, resolved at each call: an
// argument, a tensor fn reached, the device RNG at the call's start, or a
// RequiresGrad tensor's gradient at the call's start.
type ref struct {
	kind refKind
	arg  int
	leaf *Tensor // refGrad
	t    *Tensor // refHandle
}

type refKind int

const (
	refHandle refKind = iota
	refArg
	refRNG
	refGrad
)

func (r ref) resolve(d *Device, args []*Tensor) *Tensor {
	switch r.kind {
	case refArg:
		return args[r.arg]
	case refRNG:
		return d.rng
	case refGrad:
		return r.leaf.grad
	}
	return r.t
}

// planInput is one program input: a tensor resolved per call, or a buffer
// fixed at the trace (constant is set).
type planInput struct {
	from     ref
	constant *deviceData
	shape    shapes.Shape
}

// slotUpdate is a pointer fn changed: the RNG or a gradient now held by
// another tensor (end), which the plan writes again at every call.
type slotUpdate struct {
	leaf *Tensor // nil for the RNG
	end  *Tensor
}

// stepPlan is what a trace of a compiled step learned on one device.
type stepPlan struct {
	device  *Device
	program *program // nil: the step runs nothing
	inputs  []planInput
	// writes[j] are the tensors output j is stored in.
	writes [][]ref
	// returns[i] is the output fn's result i is, with its shape.
	returns []int
	slots   []slotUpdate
	// guard is, for every gradient fn looked at before replacing it,
	// whether it existed at the trace: Backward adds to an existing
	// gradient, a different program.
	guard []gradPresence
}

type gradPresence struct {
	leaf    *Tensor
	present bool
}

// guardHolds reports whether the gradients the plan depends on exist as
// they did at its trace.
func (p *stepPlan) guardHolds() bool {
	for _, g := range p.guard {
		if (g.leaf.grad != nil) != g.present {
			return false
		}
	}
	return true
}

// replayRequest is a device's part of a compiled step's meeting.
type replayRequest struct {
	plan    *stepPlan
	inputs  []*deviceData
	donate  []bool
	outputs []*deviceData
}

// replay runs the plan with the current buffers. ok is false when a
// tensor the plan reads changed shape: the caller traces again.
func (p *stepPlan) replay(ctx context.Context, g *group, args []*Tensor) (outs []*Tensor, err error, ok bool) {
	d := p.device
	req := &replayRequest{plan: p, inputs: make([]*deviceData, len(p.inputs))}
	sources := make([]*Tensor, len(p.inputs))
	for i, in := range p.inputs {
		if in.constant != nil {
			req.inputs[i] = in.constant
			continue
		}
		t := in.from.resolve(d, args)
		sources[i] = t
		if t == nil {
			return nil, nil, false // a gradient dropped since the trace
		}
		if err := t.materialize(ctx); err != nil {
			return nil, fmt.Errorf("xla: compiled step on %s: input %d: %w", d, i, err), true
		}
		if !t.shape.Equal(in.shape) {
			return nil, nil, false
		}
		req.inputs[i] = t.data
	}
	targets := make([][]*Tensor, len(p.writes))
	overwritten := map[*Tensor]bool{}
	for j, refs := range p.writes {
		targets[j] = make([]*Tensor, len(refs))
		for k, r := range refs {
			targets[j][k] = r.resolve(d, args)
			overwritten[targets[j][k]] = true
		}
	}
	req.donate = p.donations(req.inputs, sources, overwritten)
	if p.program != nil {
		d.replay = req
		err = g.markStep(ctx, g.position(d))
		d.replay = nil
		if err != nil {
			return nil, err, true
		}
	}
	for j, ts := range targets {
		for _, t := range ts {
			if t != nil {
				t.node, t.data, t.err = nil, req.outputs[j], nil
			}
		}
		req.outputs[j].exclusive = len(ts) == 1 && ts[0] != nil && !p.returned(j)
	}
	for _, s := range p.slots {
		if s.leaf == nil {
			d.rng = s.end
		} else {
			s.leaf.grad = s.end
		}
	}
	outs = make([]*Tensor, len(p.returns))
	for i, j := range p.returns {
		outs[i] = &Tensor{dev: d, shape: req.outputs[j].shape, data: req.outputs[j]}
	}
	return outs, nil, true
}

// donations says which inputs the program may take over: a buffer that
// only the tensor this call overwrites holds (exclusive), and that is
// passed once. The first call after a trace donates nothing: its buffers
// came from lazy mode, where others may share them.
func (p *stepPlan) donations(inputs []*deviceData, sources []*Tensor, overwritten map[*Tensor]bool) []bool {
	if p.program == nil || !donationEnabled() {
		return nil
	}
	seen := make(map[*deviceData]int, len(inputs))
	for _, dd := range inputs {
		seen[dd]++
	}
	donate := make([]bool, len(inputs))
	for i, dd := range inputs {
		donate[i] = sources[i] != nil && dd.exclusive && seen[dd] == 1 && overwritten[sources[i]]
	}
	return donate
}

// EnvDonate: XLADDP_DONATE=off makes compiled steps donate no buffer.
const EnvDonate = "XLADDP_DONATE"

var donationEnabled = sync.OnceValue(func() bool { return os.Getenv(EnvDonate) != "off" })

// returned reports whether output j is one of fn's results.
func (p *stepPlan) returned(j int) bool {
	for _, r := range p.returns {
		if r == j {
			return true
		}
	}
	return false
}

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

// noteGradRead records that fn looked at leaf's gradient; noteGradSet
// that it replaced it.
func (d *Device) noteGradRead(leaf *Tensor) {
	if c := d.capture; c != nil && !c.gradSet[leaf] {
		c.gradSeen[leaf] = true
	}
}

func (d *Device) noteGradSet(leaf *Tensor) {
	if c := d.capture; c != nil {
		c.gradSet[leaf] = true
	}
}

// noteCreated records a tensor made from host values during a trace.
func (d *Device) noteCreated(t *Tensor) *Tensor {
	if d.capture != nil {
		d.capture.created[t] = true
	}
	return t
}

// trace runs fn on d as in lazy mode, runs its MarkStep, and makes the plan.
func (s *CompiledStep) trace(ctx context.Context, d *Device, args []*Tensor) (*stepPlan, []*Tensor, error) {
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
	results, err := s.runTraced(d, c, args)
	if err != nil {
		return nil, nil, err
	}
	// Fresh handles hold the results, so a result fn does not keep is
	// not mistaken for state it updates in place.
	returned := make([]*Tensor, len(results))
	retNodes := make([]*node, len(results))
	for i, r := range results {
		returned[i] = d.newPending(r.node)
		retNodes[i] = r.node
	}
	clear(results)
	results = nil
	slots := c.slotChanges(d)
	c.finishing = true
	d.capture = c
	err = d.MarkStep(ctx)
	d.capture = nil
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
	outIndex := make(map[*node]int, len(tr.outputs))
	for j, o := range tr.outputs {
		outIndex[o] = j
	}
	for i, n := range retNodes {
		plan.returns[i] = outIndex[n]
	}
	plan.writes = c.writeTargets(d, tr, returned)
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
	return plan, returned, nil
}

// runTraced runs fn with d capturing; every result becomes a pending value
// (a materialized one through Detach), so it is a program output.
func (s *CompiledStep) runTraced(d *Device, c *capture, args []*Tensor) (results []*Tensor, err error) {
	d.capture = c
	defer func() { d.capture = nil }()
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
