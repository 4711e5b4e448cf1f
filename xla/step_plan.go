package xla

import (
	"context"
	"fmt"
	"os"
	"sync"

	"github.com/gomlx/compute/shapes"
)

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
	sources, err, ok := p.gatherInputs(ctx, args, req)
	if err != nil || !ok {
		return nil, err, ok
	}
	targets, overwritten := p.resolveWrites(args)
	req.donate = p.donations(req.inputs, sources, overwritten)
	if p.program != nil {
		d.replay = req
		err = g.markStep(ctx, g.position(d))
		d.replay = nil
		if err != nil {
			return nil, err, true
		}
	}
	return p.install(req, targets), nil, true
}

// gatherInputs fills req's inputs from args and the state the plan reads,
// and returns the tensors they came from (nil for constants); ok is false
// where that state no longer fits the plan.
func (p *stepPlan) gatherInputs(ctx context.Context, args []*Tensor, req *replayRequest) (sources []*Tensor, err error, ok bool) {
	d := p.device
	sources = make([]*Tensor, len(p.inputs))
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
	return sources, nil, true
}

// resolveWrites is the tensors each output is written to, and the set of
// them.
func (p *stepPlan) resolveWrites(args []*Tensor) (targets [][]*Tensor, overwritten map[*Tensor]bool) {
	targets = make([][]*Tensor, len(p.writes))
	overwritten = map[*Tensor]bool{}
	for j, refs := range p.writes {
		targets[j] = make([]*Tensor, len(refs))
		for k, r := range refs {
			targets[j][k] = r.resolve(p.device, args)
			overwritten[targets[j][k]] = true
		}
	}
	return targets, overwritten
}

// install assigns the replayed outputs of req to their targets and the
// RNG and gradient slots, and returns the step's results.
func (p *stepPlan) install(req *replayRequest, targets [][]*Tensor) []*Tensor {
	d := p.device
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
	outs := make([]*Tensor, len(p.returns))
	for i, j := range p.returns {
		outs[i] = &Tensor{dev: d, shape: req.outputs[j].shape, data: req.outputs[j]}
	}
	return outs
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
