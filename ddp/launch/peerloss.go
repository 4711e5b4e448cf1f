package launch

// A worker whose collective lost a peer commits the last step it
// completed and exits 75 (training.Loop.End), leaving a note in the
// flight directory. The agent tells that from a preemption by the note:
// the job goes on from the committed step without the lost node, where a
// preemption ends ddprun with 75.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/xladdp/xladdp/ddp/internal/procset"
	"github.com/xladdp/xladdp/internal/workerenv"
)

// peerLoss is what this node's workers said of a peer's loss: the first
// note of a commit (by rank), "" when none wrote one.
func (set workerSet) peerLoss(dir string) string {
	for _, w := range set.Processes {
		note := workerenv.ReadPeerLossNote(dir, w.Rank)
		for _, done := range []string{workerenv.Committed, workerenv.Regrouping} {
			// A step held for a joining node is no peer's loss.
			if what, ok := strings.CutPrefix(note, done); ok && !strings.HasPrefix(what, workerenv.Held) {
				return fmt.Sprintf("rank %d: %s", w.Rank, what)
			}
		}
	}
	return ""
}

// committing reports whether a worker still running is committing a
// step after a peer's loss, or has committed and neither exited nor
// said it regroups yet.
func (set workerSet) committing(dir string) bool {
	for _, w := range set.Processes {
		note := workerenv.ReadPeerLossNote(dir, w.Rank)
		if !w.Exited() && (strings.HasPrefix(note, workerenv.Committing) || strings.HasPrefix(note, workerenv.Committed)) {
			return true
		}
	}
	return false
}

// settleAfterLoss stops the workers once the round ended for another
// node's failure or loss: a worker committing the step it completed gets
// procset.PreemptGrace to finish (its collective lost the peer at once,
// long before the agents noticed); the others are stopped as after any
// failure. When liveOK and every worker then waits to regroup in place,
// none is stopped, and it returns true.
func (set workerSet) settleAfterLoss(dir string, liveOK bool) (live bool) {
	deadline := time.Now().Add(procset.PreemptGrace)
	for set.committing(dir) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if liveOK && set.regrouping(dir) != "" {
		return true
	}
	set.stop()
	return false
}

// lostPeer ends the attempt whose workers all exited 0 or 75 with a
// peer's loss noted, or wait alive to regroup (live): the other agents
// are told (their workers committed too, or are stopped), and the job
// goes on from the committed step.
func (r *attemptRun) lostPeer(why string, live bool) outcome {
	r.sayAlive()
	bg := context.WithoutCancel(r.ctx)
	lost, err := r.markLost(bg)
	if lost != "" {
		why = lost + "; " + why
	}
	res := outcome{kind: peerLost, why: why}
	if live {
		res.live = &liveWorkers{set: r.set, round: r.a.round}
	}
	res.storeErr = errors.Join(r.m.fail(bg, r.a.round, r.a.node, why, time.Now()), err)
	return res
}

// survivedBeat is the heartbeat of a node whose round ended on another
// node's failure or loss while it lived: it beats no more in the round,
// and is not lost.
const survivedBeat = "survived"

// sayAlive sets this node's heartbeat to survivedBeat, so that the
// others do not take it for lost while its workers commit and stop.
func (r *attemptRun) sayAlive() {
	rz, ok := r.m.(*rendezvous)
	if !ok || r.a.nnodes == 1 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), admitWait)
	defer cancel()
	_ = rz.client.Set(ctx, rz.key(r.a.round, "beat", r.a.node), []byte(survivedBeat))
}

// markLost records, for the next round, the nodes of this one whose
// agents beat no heartbeat while this node watched (lostWatch), and says
// which: the next round closes as soon as the others joined, where its
// last call would wait LastCallTimeout for nodes that do not come back.
func (r *attemptRun) markLost(ctx context.Context) (string, error) {
	rz, ok := r.m.(*rendezvous)
	if !ok || r.a.nnodes == 1 {
		return "", nil
	}
	before, err := rz.heartbeats(ctx, r.a.round, r.a.nnodes, r.a.node)
	if err != nil {
		return "", err
	}
	start := time.Now()
	time.Sleep(max(3*r.cfg.MonitorInterval, lostWatch))
	after, err := rz.heartbeats(ctx, r.a.round, r.a.nnodes, r.a.node)
	if err != nil {
		return "", err
	}
	var ids, names []string
	for n := range r.a.nnodes {
		if n != r.a.node && !alive(after[n]) && before[n] == after[n] {
			ids = append(ids, r.a.agents[n])
			names = append(names, fmt.Sprintf("node %d was lost: its agent, %s, beat no heartbeat in the %s after this node's workers lost a peer",
				n, r.a.agents[n], time.Since(start).Round(100*time.Millisecond)))
		}
	}
	if len(ids) == 0 {
		return "", nil
	}
	_, err = rz.update(ctx, func(s rdzvState) rdzvState { return s.lose(r.a.round, ids...) })
	return strings.Join(names, "; "), err
}

// lostWatch is the least time markLost watches the heartbeats: every
// live agent beats in it, on a loaded host too.
const lostWatch = time.Second

// alive reports whether a node's heartbeat says it ended its round
// alive: its workers finished, or it survived another's loss.
func alive(beat string) bool { return beat == doneBeat || beat == survivedBeat }
