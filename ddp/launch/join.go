package launch

// A node admitted while the job runs (--nnodes=MIN:MAX) enters without
// new processes on the job's nodes where their workers allow it: every
// worker said it can hold a step in memory (workerenv.MarkJoinable), so
// instead of SIGTERM its agent asks it to hold the next step
// (workerenv.RequestJoin); the ranks agree on that step, hold it, note
// it (workerenv.Held) and wait for their place like a lost peer's
// survivors. The attempt then ends as a membership change with live
// workers, the next round adopts them beside the new node, whose
// workers heal from a live peer's memory (ddp/checkpoint). Workers that
// did not offer, or hold nothing within joinHoldWait, are stopped with
// SIGTERM as before: they checkpoint and the job restarts.

import (
	"fmt"
	"strings"
	"time"

	"github.com/xladdp/xladdp/internal/workerenv"
)

// joinHoldWait bounds the wait for the workers to hold a step once asked:
// a step's time, on a loaded host, with room.
const joinHoldWait = 2 * time.Minute

// askToHold asks this node's workers to hold the next step for the
// joining node(s) when every one offered to, and reports whether the
// attempt waits for them to: up to joinHoldWait after the ask.
func (r *attemptRun) askToHold() bool {
	if !r.holdAsked.IsZero() {
		if time.Since(r.holdAsked) < joinHoldWait {
			return true
		}
		r.say("ddprun: node %d's workers held no step within %v of the request for the joining node(s): stopping them "+
			"(SIGTERM: they checkpoint, and the job restarts with the new node)", r.a.node, joinHoldWait)
		return false
	}
	if r.regroupDir == "" || !r.set.joinable(r.regroupDir) {
		return false
	}
	if err := workerenv.RequestJoin(r.regroupDir, r.a.round); err != nil {
		r.say("ddprun: %v: stopping the workers instead", err)
		return false
	}
	r.holdAsked = time.Now()
	return true
}

// joinable reports whether every worker runs and offered to hold a step
// for a joining node.
func (set workerSet) joinable(dir string) bool {
	for _, w := range set.Processes {
		if w.Exited() || !workerenv.Joinable(dir, w.LocalRank) {
			return false
		}
	}
	return len(set.Processes) > 0
}

// heldForJoin reports whether every worker waits for its place holding a
// step for a joining node (not after a peer's loss).
func (set workerSet) heldForJoin(dir string) bool {
	for _, w := range set.Processes {
		what, ok := strings.CutPrefix(workerenv.ReadPeerLossNote(dir, w.Rank), workerenv.Regrouping)
		if !ok || !strings.HasPrefix(what, workerenv.Held) {
			return false
		}
	}
	return true
}

// regroupForJoin ends the attempt once the workers hold a step for the
// joining node(s) and wait, alive, for their place beside them.
func (r *attemptRun) regroupForJoin(note string) outcome {
	n, err := r.w.decided(r.ctx)
	return outcome{kind: membershipChange, admit: max(n, 1), why: note, storeErr: err,
		live: &liveWorkers{set: r.set, round: r.a.round}}
}

// say prints a line of the agent's.
func (r *attemptRun) say(format string, a ...any) {
	consoleMu.Lock()
	defer consoleMu.Unlock()
	fmt.Fprintf(r.stderr, format+"\n", a...)
}
