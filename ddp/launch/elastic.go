package launch

// Nodes arriving at and lost from a running job. A node that arrives
// while an elastic job runs is admitted as torchrun does: the late node
// says it waits (joinAtNextRestart), node 0's agent sees it at a monitor
// tick and ends the round for every agent, their workers get SIGTERM (a
// worker with a checkpointer commits one and exits 75), and the next
// round meets with the late node. Such a restart is a membership change,
// not a failure: --max_restarts does not count it. A store whose host
// died ends the job within seconds (storeBack).

import (
	"context"
	"fmt"
	"time"
)

// admitWait bounds the store calls of an admission check, so that a tick
// or a failure is never held up by a store that is gone.
const admitWait = time.Second

// elastic reports whether nodes can join a running job: a c10d
// rendezvous with --nnodes=MIN:MAX.
func (c Config) elastic() bool { return c.rules().elastic() }

// admitting is how many waiting nodes round ends to admit (0: none):
// node 0, seeing some while the job is below its largest size, decides
// it for every agent (rdzvState.admit); the others read the decision.
func (w *watch) admitting(ctx context.Context) (int, error) {
	r := w.r
	if !r.cfg.elastic() || w.a.nnodes >= r.cfg.NNodesMax {
		return 0, nil
	}
	change := func(s rdzvState) rdzvState { return s }
	if w.a.node == 0 {
		change = func(s rdzvState) rdzvState { return s.admit(w.round, r.cfg.rules()) }
	}
	return w.admission(ctx, change)
}

// decided is how many waiting nodes round already ends to admit (0:
// none), without deciding it: what a worker that failed or checkpointed
// may have been stopped for.
func (w *watch) decided(ctx context.Context) (int, error) {
	if !w.r.cfg.elastic() {
		return 0, nil
	}
	return w.admission(ctx, func(s rdzvState) rdzvState { return s })
}

// admission applies change to the rendezvous state and reads the
// round's admission.
func (w *watch) admission(ctx context.Context, change func(rdzvState) rdzvState) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, admitWait)
	defer cancel()
	s, err := w.r.update(ctx, change)
	if err != nil {
		return 0, fmt.Errorf("node %d asking whether round %d ends to admit waiting nodes: %w", w.a.node, w.round, err)
	}
	return s.decided(w.round), nil
}

// joinAtNextRestart is a node that arrived after round closed with
// nnodes nodes, in an elastic job (--nnodes=MIN:MAX): it says it waits,
// which makes the job's agents restart it to admit the node while the job
// runs below its largest size (watch.admitting); it joins the next round,
// when a node of the job opens it, within the rendezvous timeout. It
// never opens a round itself, which would start a second job beside the
// running one.
func (r *rendezvous) joinAtNextRestart(ctx context.Context, round, nnodes int) (assignment, error) {
	r.say("ddprun: the job's rendezvous closed with %d nodes before this node arrived: waiting to join at its next membership change "+
		"(while it runs below its largest size, its agents admit this node within a monitor interval: in place where its workers allow it, "+
		"else by a restart; at its largest size this node is a spare for a lost node's place)", nnodes)
	if _, err := r.update(ctx, func(s rdzvState) rdzvState { return s.wait(round, r.me) }); err != nil {
		return assignment{}, fmt.Errorf("rendezvous: saying that this node waits to join after round %d: %w", round, err)
	}
	for {
		s, err := r.read(ctx)
		if err != nil {
			return assignment{}, fmt.Errorf("rendezvous: the job ended or its store is gone before a restart admitted this node: %w", err)
		}
		if s.Round > round {
			return r.join(ctx, s.Round)
		}
		select {
		case <-ctx.Done():
			return assignment{}, fmt.Errorf("rendezvous: the running job did not restart within the rendezvous timeout to admit this node: %w",
				context.Cause(ctx))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// storeLostWait is how long a round after a lost store connection tries
// to reach the store again: a network blip passes, a dead host does not.
const storeLostWait = 10 * time.Second

// gone is why a round ends when a call to the store failed with err;
// the next round checks the store is back (storeBack).
func (r *rendezvous) gone(err error) error {
	if r.server == nil {
		r.storeLost = true
	}
	return fmt.Errorf("the rendezvous store at %s is gone (%w): the agent on --rdzv_endpoint's host died?", r.addr, err)
}

// storeBack fails at once, within storeLostWait, when the store a round
// lost is still gone: the job cannot meet again (torchrun waits out its
// rendezvous timeout, 15 minutes by default).
func (r *rendezvous) storeBack(ctx context.Context) error {
	if !r.storeLost {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, storeLostWait)
	defer cancel()
	if _, err := r.read(ctx); err != nil {
		return fmt.Errorf("rendezvous: the store at %s is still gone after %v (%w): the job cannot meet again; its host ran it "+
			"(the agent there died, or the host); start ddprun again on the nodes that are left, with --rdzv_endpoint on one of them",
			r.addr, storeLostWait, err)
	}
	r.storeLost = false
	return nil
}
