package xla

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gomlx/gomlx/backends"
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
}

// meeting is one MarkStep of the group; done closes when err is final.
type meeting struct {
	done chan struct{}
	err  error
}

func newGroup(e *Engine, devices []*Device) *group {
	return &group{
		engine:   e,
		devices:  devices,
		arrived:  make([]bool, len(devices)),
		finished: make([]bool, len(devices)),
		meeting:  &meeting{done: make(chan struct{})},
	}
}

// markStep is called by the replica at position pos. The last replica to
// arrive runs the step for all; the others wait for it, for ctx, or for the
// group to break.
func (g *group) markStep(ctx context.Context, pos int) error {
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
		select {
		case <-m.done:
			return m.err
		case <-ctx.Done():
			err := fmt.Errorf("xla: replica %d stopped waiting in MarkStep (step %d) for replicas %v: %w",
				pos, g.steps, g.missing(), context.Cause(ctx))
			g.breakWith(err)
			return err
		}
	}
	// Everyone is here: the waiting replicas do not touch their devices, so
	// this goroutine may read all their traces.
	m.err = g.runStep()
	g.steps++
	clear(g.arrived)
	g.count = 0
	g.meeting = &meeting{done: make(chan struct{})}
	if m.err != nil && g.replicated && g.broken == nil {
		g.broken = m.err
	}
	close(m.done)
	g.mu.Unlock()
	return m.err
}

// missing lists the replicas that have not arrived at the current meeting.
func (g *group) missing() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.missingLocked()
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
	g.meeting.err = err
	close(g.meeting.done)
	g.meeting = &meeting{done: make(chan struct{})}
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
	return fmt.Errorf("xla: replicas %v returned while replicas %v wait in MarkStep (step %d): "+
		"every replica must run the same number of steps", done, waiting, g.steps)
}

// runStep collects every replica's trace, checks they agree, and compiles
// (on a miss) and executes the program.
func (g *group) runStep() error {
	// Only a collection makes the weak handles of dropped tensors nil; without
	// it the set of outputs, and so the program, would depend on GC timing.
	runtime.GC()
	traces := make([]*trace, len(g.devices))
	for i, d := range g.devices {
		traces[i] = collectTrace(d)
		if traces[i].err != nil {
			return fmt.Errorf("replica %d: %w", i, traces[i].err)
		}
	}
	if err := checkSameProgram(traces); err != nil {
		return err
	}
	if len(traces[0].nodes) == 0 {
		g.advanceEpochs()
		return nil
	}
	p, err := g.engine.cache.get(g.devices, traces)
	if err != nil {
		return err
	}
	if err := g.execute(p, traces); err != nil {
		return err
	}
	g.advanceEpochs()
	return nil
}

func (g *group) advanceEpochs() {
	for _, d := range g.devices {
		d.stepEpoch++
		d.pending = d.pending[:0]
	}
}

// execute runs p with each replica's parameters and swaps the outputs into
// the live handles.
func (g *group) execute(p *program, traces []*trace) error {
	n := len(g.devices)
	numParams := len(traces[0].params)
	buffers := make([]backends.Buffer, 0, n*numParams)
	donate := make([]bool, n*numParams)
	for r, tr := range traces {
		for _, pn := range tr.params {
			buf, err := pn.data.tensor.Buffer(g.engine.gomlx, backends.DeviceNum(g.devices[r].num))
			if err != nil {
				return fmt.Errorf("xla: replica %d: reading an input buffer: %w", r, err)
			}
			buffers = append(buffers, buf)
		}
	}
	start := time.Now()
	outputs, err := runProgram(g.engine.gomlx, p, buffers, donate)
	if err != nil {
		return err
	}
	metrics.executed(time.Since(start), len(traces[0].nodes))
	for r, tr := range traces {
		for i, h := range tr.handles {
			out := outputs[r*p.numOutputs+tr.handleOutput[i]]
			h.data = &deviceData{tensor: out, shape: h.shape}
			h.node = nil
		}
	}
	return nil
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
