package launch

// Live continuation after a peer's loss: a worker whose every replica
// committed the last step it completed does not exit when ddprun gave it
// a regroup directory (ddp.Run). It notes that it waits (Regrouping),
// and the agent, once every worker of its node does, ends the attempt as
// a peer's loss that needs no new processes: the next round's
// assignment is written to each worker (workerenv.WriteRegroup), which
// joins the smaller job in the same process and resumes from its commit.

import (
	"cmp"
	"fmt"
	"os"
	"strings"

	"github.com/xladdp/xladdp/internal/workerenv"
)

// liveWorkers are a node's workers that wait, alive, for their place in
// the round after round.
type liveWorkers struct {
	set   workerSet
	round int
}

// regroupDir makes the directory this node's agent hands its workers
// their next place in (nil error and "" under --restart_on_peer_loss),
// in environ's $TMPDIR.
func regroupDir(c Config, environ []string) (string, error) {
	if c.RestartOnPeerLoss {
		return "", nil
	}
	dir, err := os.MkdirTemp(cmp.Or(lookupIn(environ)("TMPDIR"), os.TempDir()), "ddprun-regroup-")
	if err != nil {
		return "", fmt.Errorf("the workers' regroup directory: %w", err)
	}
	return dir, nil
}

// regrouping is the first note of this node's workers when every one
// runs and waits for its next place after committing, else "".
func (set workerSet) regrouping(dir string) string {
	first := ""
	for _, w := range set.Processes {
		note := workerenv.ReadPeerLossNote(dir, w.Rank)
		what, ok := strings.CutPrefix(note, workerenv.Regrouping)
		if w.Exited() || !ok {
			return ""
		}
		if first == "" {
			first = fmt.Sprintf("rank %d: %s", w.Rank, what)
		}
	}
	return first
}

// adopt gives the live workers their places in this attempt's round
// instead of starting new ones: each reads its assignment, leaves the
// old group and joins the new one in the same process.
func (r *attemptRun) adopt(live *liveWorkers, environ []string) (workerSet, error) {
	a := r.a
	host, port, _ := strings.Cut(a.master, ":")
	spec := workerSpec{cfg: r.cfg, node: a.node, offset: a.offset, world: a.world, attempt: a.round, env: environ}
	dir := lookupIn(environ)(workerenv.RegroupDir)
	for _, w := range live.set.Processes {
		rank := a.offset + w.LocalRank
		env := append(workerEnv(r.cfg, spec, w.LocalRank, rank, host, port), workerenv.FlightDir+"="+r.dumps)
		if err := workerenv.WriteRegroup(dir, w.LocalRank, live.round, env); err != nil {
			live.set.stop()
			return workerSet{}, fmt.Errorf("regrouping worker rank %d in place: %w", rank, err)
		}
		live.set.renumber(w, rank)
	}
	return live.set, nil
}
