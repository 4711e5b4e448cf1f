package launch

// Admitting a node that arrives while an elastic job runs, as torchrun
// does: the late node says it waits (joinAtNextRestart), node 0's agent
// sees it at a monitor tick and ends the round for every agent, their
// workers get SIGTERM (a worker with a checkpointer commits one and exits
// 75), and the next round meets with the late node. Such a restart is a
// membership change, not a failure: --max_restarts does not count it.

import (
	"context"
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
