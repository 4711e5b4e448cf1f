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
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

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
// in environ's $TMPDIR, named after ddprun's pid; it first removes those
// of ddprun processes gone without removing theirs (kill -9).
func regroupDir(c Config, environ []string) (string, error) {
	if c.RestartOnPeerLoss {
		return "", nil
	}
	parent := cmp.Or(lookupIn(environ)("TMPDIR"), os.TempDir())
	pruneRegroupDirs(parent)
	dir, err := os.MkdirTemp(parent, fmt.Sprintf("%s%d-", regroupDirPrefix, os.Getpid()))
	if err != nil {
		return "", fmt.Errorf("the workers' regroup directory: %w", err)
	}
	return dir, nil
}

// regroupDirPrefix names ddprun's regroup directories: the prefix, the
// pid of the ddprun that made it, "-", a random part.
const regroupDirPrefix = "ddprun-regroup-"

// pruneRegroupDirs removes the regroup directories in parent whose
// ddprun is gone; a running one's, or another user's, stays.
func pruneRegroupDirs(parent string) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), regroupDirPrefix)
		pidText, _, cut := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || !cut || err != nil || pid <= 0 || !e.IsDir() {
			continue
		}
		if syscall.Kill(pid, 0) == syscall.ESRCH {
			_ = os.RemoveAll(filepath.Join(parent, e.Name()))
		}
	}
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
