package dist

import (
	"context"
	"time"

	"github.com/xladdp/xladdp/ddp/internal/transport"
)

// run is an operation's blocking form: on the caller's goroutine when the
// transport allows it and nothing is queued or running (in its place in
// the order, with no allocation), else queued and waited for.
func (g *ProcessGroup) run(ctx context.Context, c transport.Call) error {
	if g.inliner != nil && g.inliner.Inline(c) {
		if seq, ok := g.beginInline(); ok {
			c.Seq, c.Ctx = seq, ctx
			id := g.flight.Issue(flightOp(c, seq, false), 1)
			g.flight.Start(id)
			err := g.t.Run(c)
			if err == nil {
				g.finish(c)
			}
			g.flight.End(id, err)
			return g.endInline(c.Kind.String(), seq, err)
		}
	}
	return g.queue(c).Wait(ctx)
}

// blocking runs call c, checked (err: why it was refused), and waits for
// it: the blocking form of every collective.
func (g *ProcessGroup) blocking(ctx context.Context, c transport.Call, err error) error {
	if err != nil {
		return err
	}
	return g.run(ctx, c)
}

// async queues call c, checked (err: why it was refused), and returns at
// once: the Async form of every collective.
func (g *ProcessGroup) async(c transport.Call, err error) *Work {
	if err != nil {
		return finished(c.Kind.String(), err)
	}
	return g.queue(c)
}

// queue issues collective c on the executor, which numbers and times it.
func (g *ProcessGroup) queue(c transport.Call) *Work {
	return g.enqueue(c, true, func(seq uint64, deadline time.Time) (func() error, error) {
		c.Seq, c.Deadline = seq, deadline
		err := g.t.Run(c)
		if err == nil {
			g.finish(c)
		}
		return nil, err
	})
}

// finish completes what the group owes a transport's result: Avg is
// reduced as a sum, and divided here.
func (g *ProcessGroup) finish(c transport.Call) {
	if c.Op != Avg {
		return
	}
	switch c.Kind {
	case transport.AllReduce:
		transport.FinishAvg(c.Buf, g.size)
	case transport.ReduceScatter:
		transport.FinishAvg(c.Out, g.size)
	}
}

// pointToPoint issues a Send or Recv, numbered apart from the collectives:
// in order on the executor, or, when the transport starts them as they
// are issued (Features.StartAtIssue), at once; either way what is left
// of it finishes off the executor.
func (g *ProcessGroup) pointToPoint(c transport.Call) *Work {
	name := c.Kind.String()
	if !g.features.StartAtIssue {
		return g.enqueue(c, false, func(seq uint64, deadline time.Time) (func() error, error) {
			c.Seq, c.Deadline = seq, deadline
			return g.t.Start(c)
		})
	}
	g.submitMu.RLock()
	defer g.submitMu.RUnlock()
	g.mu.Lock()
	seq, label, err := g.claim(name, false)
	g.mu.Unlock()
	if err != nil {
		return finished(name, err)
	}
	c.Seq = seq
	id := g.flight.Issue(flightOp(c, seq, true), 1)
	g.flight.Start(id)
	wait, err := g.t.Start(c)
	if err != nil {
		g.flight.End(id, err)
		err = g.attribute(label, err)
		g.fail(err)
		return finished(label, err)
	}
	if wait == nil { // done already
		g.flight.End(id, nil)
		return finished(label, nil)
	}
	w := &Work{name: label, group: g, done: make(chan struct{}), flightID: id}
	g.finishOffExecutor(w, wait)
	return w
}
