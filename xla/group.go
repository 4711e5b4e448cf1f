package xla

import (
	"context"
	"fmt"
	"sync"
	"time"
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
	// shared holds ReplicaValue's values by key.
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
	defer g.engine.buffers.collectIfDue()
	prepared, err := g.prepareLocked(ctx)
	g.mu.Unlock()
	if err == nil && prepared != nil {
		err = g.run(ctx, prepared)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if m.finished {
		// A waiting replica left (its ctx ended) and broke the group while
		// the step ran: its device may be in use again, so nothing is swapped.
		return m.err
	}
	if err == nil {
		g.applyLocked(prepared)
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
