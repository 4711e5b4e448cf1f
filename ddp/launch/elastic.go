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
	"strconv"
	"time"
)

// admitWait bounds the store calls of an admission check, so that a tick
// or a failure is never held up by a store that is gone.
const admitWait = time.Second

// elastic reports whether nodes can join a running job: a c10d
// rendezvous with --nnodes=MIN:MAX.
func (c Config) elastic() bool { return c.RdzvBackend == "c10d" && c.NNodesMin < c.NNodesMax }

// admitting reports whether round ends to admit waiting nodes, and how
// many wait: node 0, seeing some while the job is below its largest
// size, decides it for every agent; the others read the decision.
func (w *watch) admitting(ctx context.Context) (int, bool) {
	r := w.r
	if !r.cfg.elastic() || w.a.nnodes >= r.cfg.NNodesMax {
		return 0, false
	}
	if w.a.node == 0 {
		ctx, cancel := context.WithTimeout(ctx, admitWait)
		n, err := r.client.Add(ctx, r.key(w.round, "waiting"), 0)
		if err == nil && n > 0 {
			_, _ = r.client.CompareSet(ctx, r.key(w.round, "admit"), nil, []byte(strconv.FormatInt(n, 10)))
		}
		cancel()
	}
	return w.decided(ctx)
}

// decided reports whether round already ends to admit waiting nodes
// (and how many), without deciding it: what a worker that failed or
// checkpointed may have seen.
func (w *watch) decided(ctx context.Context) (int, bool) {
	r := w.r
	if !r.cfg.elastic() {
		return 0, false
	}
	ctx, cancel := context.WithTimeout(ctx, admitWait)
	defer cancel()
	ok, err := r.client.Check(ctx, r.key(w.round, "admit"))
	if err != nil || !ok[0] {
		return 0, false
	}
	v, _ := r.client.Get(ctx, r.key(w.round, "admit"))
	n, _ := strconv.Atoi(string(v))
	return max(n, 1), true
}

// wait says that this node waits to join the job after round.
func (r *rendezvous) wait(ctx context.Context, round int) error {
	_, err := r.client.Add(ctx, r.key(round, "waiting"), 1)
	return err
}

// joinAtNextRestart is a node that arrived after round closed with
// nnodes nodes, in an elastic job (--nnodes=MIN:MAX): it says it waits,
// which makes the job's agents restart it to admit the node while the job
// runs below its largest size (admit.go); it joins the next round, when a
// node of the job opens it, within the rendezvous timeout. It never opens
// a round itself, which would start a second job beside the running one.
func (r *rendezvous) joinAtNextRestart(ctx context.Context, round, nnodes int) (assignment, error) {
	r.say("ddprun: the job's rendezvous closed with %d nodes before this node arrived: waiting to join at its next restart "+
		"(its agents restart it to admit this node within a monitor interval)", nnodes)
	if err := r.wait(ctx, round); err != nil {
		return assignment{}, fmt.Errorf("rendezvous: saying that this node waits to join: %w", err)
	}
	next := r.key(round+1, "joined")
	for {
		n, err := r.client.Add(ctx, next, 0)
		if err != nil {
			return assignment{}, fmt.Errorf("rendezvous: the job ended or its store is gone before a restart admitted this node: %w", err)
		}
		if n > 0 {
			return r.join(ctx, round+1)
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

// gone is why a round ends when a call to the store failed with err.
func (r *rendezvous) gone(err error) string {
	if r.server == nil {
		r.storeLost = true
	}
	return fmt.Sprintf("the rendezvous store at %s is gone (%v): the agent on --rdzv_endpoint's host died?", r.addr, err)
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
	if _, err := r.client.Add(ctx, r.key(0, "joined"), 0); err != nil {
		return fmt.Errorf("rendezvous: the store at %s is still gone after %v (%w): the job cannot meet again; its host ran it "+
			"(the agent there died, or the host); start ddprun again on the nodes that are left, with --rdzv_endpoint on one of them",
			r.addr, storeLostWait, err)
	}
	r.storeLost = false
	return nil
}
