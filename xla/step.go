package xla

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gomlx/compute"
	"github.com/gomlx/gomlx/core/tensors"
)

// The step pipeline a group's last-arriving replica runs (meeting in
// group.go): prepare (every replica's trace, or a compiled step's replay
// requests) → program (the cache, compiling on a miss under the step's
// ctx) → execute → apply (outputs into the devices' nodes).

// step is one MarkStep of the group as it goes through the pipeline:
// what prepare takes out of the devices under the group lock (every
// replica's trace, or its replay request), then what run fills in (the
// program and its outputs), which apply gives back to the devices.
type step struct {
	traces []*trace
	// replays are set instead of traces when the replicas run a compiled
	// step's program.
	replays []*replayRequest
	// program ran, and outputs are its results, device-major, computed
	// by execution (nil in compile-only mode).
	program   *program
	outputs   []*tensors.Tensor
	execution *stepExecution
}

// prepareLocked collects every replica's trace and checks they agree. It
// returns nil, nil when there is nothing to run (the epoch still advances).
func (g *group) prepareLocked(ctx context.Context) (*step, error) {
	if ps, err, isReplay := g.prepareReplayLocked(ctx); isReplay {
		return ps, err
	}
	recs := make([]*recording, len(g.devices))
	unknown := false
	for i, d := range g.devices {
		recs[i] = d.record()
		unknown = unknown || recs[i].liveness == nil
	}
	if unknown {
		// Only a collection makes the weak handles of dropped tensors nil;
		// without it the set of outputs, and so the program, would depend
		// on GC timing. Once per new recording: a repeated step reuses it.
		runtime.GC()
		metrics.collected()
		g.engine.buffers.collected()
		for _, r := range recs {
			if r.liveness == nil {
				r.learn()
			}
		}
	}
	traces := make([]*trace, len(g.devices))
	for i, r := range recs {
		traces[i] = collectTrace(r)
		if pairs := g.devices[i].observer.stepAliases(g.devices[i], traces[i]); pairs != nil {
			traces[i].setAliases(pairs)
		}
		if traces[i].err != nil {
			if g.replicated {
				return nil, &ReplicaError{Replica: i, Err: traces[i].err}
			}
			return nil, traces[i].err
		}
	}
	if err := checkSameProgram(traces); err != nil {
		return nil, err
	}
	if len(traces[0].nodes) == 0 {
		g.advanceEpochsLocked()
		return nil, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("xla: MarkStep on %s stopped before compiling: %w", deviceSetKey(g.devices), context.Cause(ctx))
	}
	return &step{traces: traces}, nil
}

// run compiles (on a cache miss) and executes the prepared step, filling
// in its program and outputs. It reads only the traces, which no replica
// changes while it waits.
func (g *group) run(ctx context.Context, ps *step) error {
	release, err := g.engine.enter("MarkStep")
	if err != nil {
		return err
	}
	defer release()
	var p *program
	var donate []bool
	inputs := make([][]*deviceData, len(g.devices))
	if ps.replays != nil {
		p = ps.replays[0].plan.program
		donate = slices.Clone(ps.replays[0].donate)
		for r, req := range ps.replays {
			inputs[r] = req.inputs
			for i, dn := range req.donate {
				donate[i] = donate[i] && dn // one set of positions for every device
			}
		}
	} else {
		if p, err = g.engine.cache.get(ctx, g.devices, ps.traces); err != nil {
			return err
		}
		for r, tr := range ps.traces {
			inputs[r] = make([]*deviceData, len(tr.params))
			for i, pn := range tr.params {
				inputs[r][i] = pn.data
			}
		}
	}
	// The previous step reads nothing this one writes (buffers are never
	// reused), so only its outcome is waited for, after this one was
	// traced and compiled.
	for _, d := range g.devices {
		if err := d.lastStepError(); err != nil {
			return err
		}
	}
	compileOnly, err := g.engine.compileOnlyMode()
	if err != nil {
		return err
	}
	if compileOnly {
		metrics.skippedExecution()
		ps.program, ps.outputs = p, zeroOutputs(p, len(g.devices))
		return nil
	}
	outputs, ran, err := g.execute(ctx, p, inputs, donate)
	if err != nil {
		return err
	}
	ps.program, ps.outputs, ps.execution = p, outputs, ran
	return nil
}

// applyLocked stores each output in its node, which later traces read as
// an input, settles the live handles, and starts a new trace epoch on
// every device.
func (g *group) applyLocked(ps *step) {
	if ps != nil && ps.replays != nil {
		n := ps.program.numOutputs
		for r, req := range ps.replays {
			g.devices[r].forgetHistories()
			req.outputs = make([]*deviceData, n)
			for i, t := range ps.outputs[r*n : (r+1)*n] {
				req.outputs[i] = &deviceData{tensor: t, shape: t.Shape(), producer: ps.execution}
			}
		}
		g.advanceEpochsLocked()
		return
	}
	if ps != nil {
		for r, tr := range ps.traces {
			d := g.devices[r]
			d.observer.stepRan(tr, ps.program)
			d.forgetHistories()
			leafValues := map[*node]bool{}
			for _, h := range tr.handles {
				if h.requiresGrad {
					leafValues[h.node] = true
				}
			}
			for i, n := range tr.outputs {
				n.data = &deviceData{tensor: ps.outputs[r*ps.program.numOutputs+i], shape: n.shape, producer: ps.execution}
				d.keepHistory(n, leafValues[n])
			}
			for _, h := range tr.handles {
				h.settle()
			}
		}
		g.advanceEpochsLocked()
	}
}

// forgetHistories drops what the previous MarkStep kept for Backward: a
// value's recipe lives one step, so recipes never chain across steps.
func (d *Device) forgetHistories() {
	for _, dd := range d.kept {
		dd.history.inputs = nil
		dd.history, dd.historyLost = nil, true
	}
	clear(d.kept)
	d.kept = d.kept[:0]
}

// keepHistory decides what output n's new buffer remembers of its recipe.
// A RequiresGrad tensor's value is a leaf: gradients stop there. A value a
// gradient may still need keeps its recipe one step; otherwise the recipe
// is dropped, so the buffers it read can be freed.
func (d *Device) keepHistory(n *node, leafValue bool) {
	switch {
	case leafValue || !n.needsGrad:
		n.inputs = nil
	case n.differentiated:
		n.data.historyLost = true
		n.inputs = nil
	default:
		n.data.history = n
		d.kept = append(d.kept, n.data)
	}
}

func (g *group) advanceEpochsLocked() {
	for _, d := range g.devices {
		d.stepEpoch++
		clear(d.pending) // drop the values, not just the length
		d.pending = d.pending[:0]
	}
}

// execute runs p with each replica's input buffers, unless ctx ended
// first (a program once started runs to its end: PJRT cannot stop it).
func (g *group) execute(ctx context.Context, p *program, perReplica [][]*deviceData, donate []bool) ([]*tensors.Tensor, *stepExecution, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("xla: MarkStep on %s stopped before executing: %w", deviceSetKey(g.devices), context.Cause(ctx))
	}
	n := len(g.devices)
	numParams := len(perReplica[0])
	buffers := make([]compute.Buffer, 0, n*numParams)
	inputs := make([]*deviceData, 0, n*numParams)
	for r, ins := range perReplica {
		for _, dd := range ins {
			if dd.donated {
				return nil, nil, errDonated
			}
			inputs = append(inputs, dd)
			buf, err := dd.tensor.Buffer(g.engine.gomlx, compute.DeviceNum(g.devices[r].num))
			if err != nil {
				return nil, nil, fmt.Errorf("xla: replica %d: reading an input buffer: %w", r, err)
			}
			buffers = append(buffers, buf)
		}
	}
	start := time.Now()
	outputs, x, err := runProgram(g.engine, p, n, buffers, inputs, donate)
	if err != nil {
		return nil, nil, err
	}
	for i, dn := range donate {
		if dn {
			for r := range perReplica {
				perReplica[r][i].donated = true
			}
			metrics.donated(len(perReplica))
		}
	}
	for _, o := range outputs {
		g.engine.buffers.made(int64(o.Shape().Memory()))
	}
	ran := &stepExecution{x: x, step: g.steps, devices: deviceSetKey(g.devices)}
	for _, d := range g.devices {
		d.lastStep.Store(ran)
	}
	metrics.executed(time.Since(start), len(p.description))
	if len(g.devices) > 1 && p.allReduces > 0 {
		metrics.allReduced(p.allReduces)
	}
	return outputs, ran, nil
}

// prepareReplayLocked prepares a compiled step's meeting: isReplay is
// false when no replica runs one. Every replica must run the same program.
func (g *group) prepareReplayLocked(ctx context.Context) (ps *step, err error, isReplay bool) {
	reqs := make([]*replayRequest, len(g.devices))
	var lazy []int
	for i, d := range g.devices {
		if reqs[i] = d.replay; reqs[i] == nil {
			lazy = append(lazy, i)
		}
	}
	switch {
	case len(lazy) == len(g.devices):
		return nil, nil, false
	case len(lazy) > 0:
		return nil, fmt.Errorf("%w: replicas %v ran MarkStep while the others ran a compiled step (step %d)",
			ErrReplicaMismatch, lazy, g.steps), true
	}
	for i, req := range reqs[1:] {
		if req.plan.program != reqs[0].plan.program {
			return nil, fmt.Errorf("%w: replica %d ran a different compiled program than replica 0 (step %d): %s",
				ErrReplicaMismatch, i+1, g.steps, explainDifference(reqs[0].plan.program.description, req.plan.program.description)), true
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("xla: compiled step on %s stopped before executing: %w", deviceSetKey(g.devices), context.Cause(ctx)), true
	}
	return &step{replays: reqs}, nil, true
}

// checkSameProgram fails unless every replica traced the same program,
// naming which replicas differ and the first differing node.
func checkSameProgram(traces []*trace) error {
	byFP := map[fingerprint][]int{}
	var order []fingerprint
	for i, tr := range traces {
		if _, ok := byFP[tr.fingerprint]; !ok {
			order = append(order, tr.fingerprint)
		}
		byFP[tr.fingerprint] = append(byFP[tr.fingerprint], i)
	}
	if len(order) == 1 {
		return nil
	}
	sort.SliceStable(order, func(a, b int) bool { return byFP[order[a]][0] < byFP[order[b]][0] })
	var groups []string
	for _, fp := range order {
		groups = append(groups, fmt.Sprint(byFP[fp]))
	}
	first, other := byFP[order[0]][0], byFP[order[1]][0]
	return fmt.Errorf("%w: replicas traced %d different programs (replica groups %s); replica %d vs replica %d: %s",
		ErrReplicaMismatch, len(order), strings.Join(groups, " vs "), first, other,
		explainDifference(traces[first].describe(), traces[other].describe()))
}

// ErrReplicaMismatch: replicas traced different programs before a MarkStep.
var ErrReplicaMismatch = errors.New("xla: replicas diverged")
