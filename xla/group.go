package xla

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// group is a set of devices whose MarkSteps meet and run one SPMD program.
type group struct {
	engine  *Engine
	devices []*Device

	mu       sync.Mutex
	arrived  []bool
	count    int
	meeting  *meeting
	finished []bool
	// broken is set once the group can no longer meet; every MarkStep then
	// returns it.
	broken error
	steps  int
	// replicated is true for RunReplicas groups: one failed step ends every
	// replica. A standalone device reports the error and stays usable.
	replicated bool
	// shared holds Device.ReplicaShared's values.
	shared map[any]any
}

// meeting is one MarkStep of the group; done closes when err is final.
type meeting struct {
	done     chan struct{}
	err      error
	finished bool
	// running is set once every replica arrived and the step is compiling
	// or executing outside the group lock.
	running bool
}

func newMeeting() *meeting { return &meeting{done: make(chan struct{})} }

// finishLocked makes err the meeting's result and wakes its waiters, once.
func (m *meeting) finishLocked(err error) {
	if m.finished {
		return
	}
	m.finished, m.err = true, err
	close(m.done)
}

func newGroup(e *Engine, devices []*Device) *group {
	return &group{
		engine:   e,
		devices:  devices,
		arrived:  make([]bool, len(devices)),
		finished: make([]bool, len(devices)),
		meeting:  newMeeting(),
	}
}

// markStep is called by the replica at position pos. The last replica to
// arrive collects every trace under the group lock (the others are
// waiting, so their devices are still), then compiles and executes with
// the lock released, so a waiting replica whose ctx ends can leave at once;
// results are swapped in only if nobody left meanwhile.
func (g *group) markStep(ctx context.Context, pos int) error {
	if err := ctx.Err(); err != nil {
		err = fmt.Errorf("xla: MarkStep on %s not started: %w", g.devices[pos], context.Cause(ctx))
		if g.replicated {
			g.breakWith(err)
		}
		return err
	}
	release, err := g.engine.enter("MarkStep") // fail at once after Close, even with nothing to run
	if err != nil {
		if g.replicated {
			g.breakWith(err)
		}
		return err
	}
	release()
	g.mu.Lock()
	if g.broken != nil {
		g.mu.Unlock()
		return g.broken
	}
	g.arrived[pos] = true
	g.count++
	m := g.meeting
	if g.count < len(g.devices) {
		if err := g.checkFinishedLocked(); err != nil {
			g.mu.Unlock()
			return err
		}
		g.mu.Unlock()
		return g.wait(ctx, pos, m)
	}
	m.running = true
	prepared, err := g.prepareLocked(ctx)
	g.mu.Unlock()
	var results *stepResults
	if err == nil && prepared != nil {
		results, err = g.run(ctx, prepared)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if m.finished {
		// A waiting replica left (its ctx ended) and broke the group while
		// the step ran: its device may be in use again, so nothing is swapped.
		return m.err
	}
	if err == nil {
		g.applyLocked(prepared, results)
		g.steps++
	} else if g.replicated {
		g.broken = err
	}
	clear(g.arrived)
	g.count = 0
	g.meeting = newMeeting()
	m.finishLocked(err)
	return err
}

// wait blocks a replica that arrived before the last one until the step
// is done, ctx ends, or the replica timeout passes; leaving early breaks
// the group with an error that names who was missing.
func (g *group) wait(ctx context.Context, pos int, m *meeting) error {
	timer := time.NewTimer(g.engine.waitLimit())
	defer timer.Stop()
	var cause error
	select {
	case <-m.done:
		return m.err
	case <-ctx.Done():
		cause = context.Cause(ctx)
	case <-timer.C:
		cause = fmt.Errorf("replica timeout %s passed (Engine.SetReplicaTimeout)", g.engine.waitLimit())
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if m.finished {
		return m.err
	}
	var err error
	if m.running {
		err = fmt.Errorf("xla: replica %d stopped waiting in MarkStep (step %d) while the step of all %d replicas was compiling or executing: %w",
			pos, g.steps, len(g.devices), cause)
	} else {
		err = fmt.Errorf("xla: replica %d stopped waiting in MarkStep (step %d) for replicas %v: %w",
			pos, g.steps, g.missingLocked(), cause)
	}
	err = &groupError{err}
	g.breakLocked(err)
	return err
}

func (g *group) missingLocked() []int {
	var ids []int
	for i, a := range g.arrived {
		if !a {
			ids = append(ids, i)
		}
	}
	return ids
}

// breakWith ends the group: waiting replicas wake with err, later MarkSteps
// return it. The first cause wins.
func (g *group) breakWith(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.breakLocked(err)
}

func (g *group) breakLocked(err error) {
	if g.broken != nil {
		return
	}
	g.broken = err
	g.meeting.finishLocked(err)
	g.meeting = newMeeting()
}

// finish records that the replica at pos returned. Replicas still waiting
// in a MarkStep would wait forever, so that breaks the group.
func (g *group) finish(pos int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.finished[pos] = true
	if g.count > 0 {
		g.breakLocked(g.finishedError())
	}
}

func (g *group) checkFinishedLocked() error {
	for _, f := range g.finished {
		if f {
			err := g.finishedError()
			g.breakLocked(err)
			return err
		}
	}
	return nil
}

func (g *group) finishedError() error {
	var done, waiting []int
	for i := range g.devices {
		if g.finished[i] {
			done = append(done, i)
		} else if g.arrived[i] {
			waiting = append(waiting, i)
		}
	}
	return &groupError{fmt.Errorf("xla: replicas %v returned while replicas %v wait in MarkStep (step %d): "+
		"every replica must run the same number of steps", done, waiting, g.steps)}
}

// preparedStep is what the step runner takes out of the devices under the
// group lock: every replica's trace.
type preparedStep struct {
	traces []*trace
	// replays are set instead of traces when the replicas run a compiled
	// step's program.
	replays []*replayRequest
}

// stepResults are the executed program's outputs, device-major.
type stepResults struct {
	program *program
	outputs []*tensors.Tensor
}

// prepareLocked collects every replica's trace and checks they agree. It
// returns nil, nil when there is nothing to run (the epoch still advances).
func (g *group) prepareLocked(ctx context.Context) (*preparedStep, error) {
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
		for _, r := range recs {
			if r.liveness == nil {
				r.learn()
			}
		}
	}
	traces := make([]*trace, len(g.devices))
	for i, r := range recs {
		traces[i] = collectTrace(r)
		if c := g.devices[i].capture; c != nil && c.finishing {
			traces[i].setAliases(c.aliasPairs(g.devices[i], traces[i]))
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
	return &preparedStep{traces: traces}, nil
}

// run compiles (on a cache miss) and executes the prepared step. It reads
// only the traces, which no replica changes while it waits.
func (g *group) run(ctx context.Context, ps *preparedStep) (*stepResults, error) {
	release, err := g.engine.enter("MarkStep")
	if err != nil {
		return nil, err
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
			return nil, err
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
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("xla: MarkStep on %s stopped before executing: %w", deviceSetKey(g.devices), context.Cause(ctx))
	}
	compileOnly, err := g.engine.compileOnlyMode()
	if err != nil {
		return nil, err
	}
	if compileOnly {
		metrics.skippedExecution()
		return &stepResults{program: p, outputs: zeroOutputs(p, len(g.devices))}, nil
	}
	outputs, err := g.execute(p, inputs, donate)
	if err != nil {
		return nil, err
	}
	return &stepResults{program: p, outputs: outputs}, nil
}

// applyLocked stores each output in its node, which later traces read as
// an input, settles the live handles, and starts a new trace epoch on
// every device.
func (g *group) applyLocked(ps *preparedStep, res *stepResults) {
	if ps != nil && ps.replays != nil {
		n := res.program.numOutputs
		for r, req := range ps.replays {
			g.devices[r].forgetHistories()
			req.outputs = make([]*deviceData, n)
			for i, t := range res.outputs[r*n : (r+1)*n] {
				req.outputs[i] = &deviceData{tensor: t, shape: t.Shape()}
			}
		}
		g.advanceEpochsLocked()
		return
	}
	if ps != nil {
		for r, tr := range ps.traces {
			d := g.devices[r]
			if c := d.capture; c != nil && c.finishing {
				c.trace, c.program = tr, res.program
			}
			d.forgetHistories()
			leafValues := map[*node]bool{}
			for _, h := range tr.handles {
				if h.requiresGrad {
					leafValues[h.node] = true
				}
			}
			for i, n := range tr.outputs {
				n.data = &deviceData{tensor: res.outputs[r*res.program.numOutputs+i], shape: n.shape}
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

// execute runs p with each replica's input buffers.
func (g *group) execute(p *program, perReplica [][]*deviceData, donate []bool) ([]*tensors.Tensor, error) {
	n := len(g.devices)
	numParams := len(perReplica[0])
	buffers := make([]backends.Buffer, 0, n*numParams)
	inputs := make([]*deviceData, 0, n*numParams)
	for r, ins := range perReplica {
		for _, dd := range ins {
			if dd.donated {
				return nil, errDonated
			}
			inputs = append(inputs, dd)
			buf, err := dd.tensor.Buffer(g.engine.gomlx, backends.DeviceNum(g.devices[r].num))
			if err != nil {
				return nil, fmt.Errorf("xla: replica %d: reading an input buffer: %w", r, err)
			}
			buffers = append(buffers, buf)
		}
	}
	start := time.Now()
	outputs, x, err := runProgram(g.engine, p, n, buffers, inputs, donate)
	if err != nil {
		return nil, err
	}
	for i, dn := range donate {
		if dn {
			for r := range perReplica {
				perReplica[r][i].donated = true
			}
			metrics.donated(len(perReplica))
		}
	}
	step := &stepExecution{x: x, step: g.steps, devices: deviceSetKey(g.devices)}
	for _, d := range g.devices {
		d.lastStep.Store(step)
	}
	metrics.executed(time.Since(start), len(p.description))
	return outputs, nil
}

// prepareReplayLocked prepares a compiled step's meeting: isReplay is
// false when no replica runs one. Every replica must run the same program.
func (g *group) prepareReplayLocked(ctx context.Context) (ps *preparedStep, err error, isReplay bool) {
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
	return &preparedStep{replays: reqs}, nil, true
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
