package checkpoint

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/ddp/internal/regroup"
	"github.com/xladdp/xladdp/internal/workerenv"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/optim"
	"github.com/xladdp/xladdp/xla/safetensors"
)

// A node joining a running job (ddprun --nnodes=MIN:MAX) enters without
// a restart where the workers regroup in place: asked by their agent
// (workerenv.RequestJoin), the ranks agree at the next step boundary
// (the preemption flag's all-reduce carries the request), every process
// holds that step in memory, as the bytes its checkpoint file would
// have, and Step returns heldForJoin; ddp.Run regroups the process with
// the new node, and the next Restore sends the held step from a live
// process to every rank of the larger job (heal.go): the new node reads
// no file. Rank 0 also writes the step to the checkpoint directory while
// the agents meet (writeHeld), so that a restart meanwhile resumes from
// it; where that write did not land, a process that held the step
// commits it when the heal fails or it does not regroup (CommitHeld). A sharded optimizer's step
// is committed as a sharded checkpoint instead (each shard is re-split
// at the new world size), which the new node reads.

// stopFor is what the ranks agreed to do after a step.
type stopFor int32

const (
	goOn stopFor = iota
	// forJoin: hold the step for a joining node and regroup in place.
	forJoin
	// forPreemption: commit the step and exit (SIGTERM); it outranks a
	// join.
	forPreemption
)

// joinOffer is a checkpointer's offer to hold a step for a joining node:
// where its agent asks (dir, in round), and how to take the offer back.
type joinOffer struct {
	dir      string
	round    int
	withdraw func()
}

// offerToHold offers, when this pass regroups in place under ddprun, to
// hold a step for a joining node; otherwise (or when the offer cannot be
// made) no offer, and an admission stops the workers with SIGTERM.
func offerToHold() joinOffer {
	none := joinOffer{withdraw: func() {}}
	w, err := workerenv.Parse(os.Getenv)
	if !regroup.Active() || err != nil || w.LocalRank == workerenv.Unset || w.RestartCount == workerenv.Unset {
		return none
	}
	dir := os.Getenv(workerenv.RegroupDir)
	withdraw, err := workerenv.MarkJoinable(dir, w.LocalRank)
	if err != nil {
		return none
	}
	return joinOffer{dir: dir, round: w.RestartCount, withdraw: withdraw}
}

// requested reports whether the agent asked for the step.
func (o joinOffer) requested() bool { return workerenv.JoinRequested(o.dir, o.round) }

// heldStep is the step this process holds for a joining node.
type heldStep struct {
	step int // -1: none
	data []byte
	// path is where CommitHeld commits it, in its checkpoint directory.
	path string
}

var (
	heldMu sync.Mutex
	held   = heldStep{step: -1}
)

// holdStep keeps h as the held step.
func holdStep(h heldStep) {
	heldMu.Lock()
	defer heldMu.Unlock()
	held = h
}

// takeHeld returns the held step, and with drop lets it go.
func takeHeld(drop bool) heldStep {
	heldMu.Lock()
	defer heldMu.Unlock()
	h := held
	if drop {
		held = heldStep{step: -1}
	}
	return h
}

// hold keeps c in this process's memory, as its checkpoint file's bytes,
// for a joining node, and notes it for the agent.
func (ck *Checkpointer) hold(ctx context.Context, dev *xla.Device, g *dist.ProcessGroup, c optim.Checkpoint) error {
	what := fmt.Sprintf("holding step %d for a joining node", c.Step)
	return checkpointOnce(ctx, dev, g, what, c, func(take func() (optim.Snapshot, error)) error {
		if err := ck.finishWrite(); err != nil {
			return fmt.Errorf("checkpoint: writing the previous checkpoint: %w", err)
		}
		snap, err := take()
		if err != nil {
			return err
		}
		data, err := snap.Encode()
		if err != nil {
			return fmt.Errorf("checkpoint: %s: %w", what, err)
		}
		path := ck.path(c.Step, plain)
		holdStep(heldStep{step: c.Step, data: data, path: path})
		if g.Rank() == 0 {
			ck.writeHeld(dev, path, data)
		}
		return noteHeld(g, fmt.Sprintf("step %d in this process's memory (%s)", c.Step, sizeOf(len(data))))
	})
}

// writeHeld writes the held step's bytes to path off the step, as a
// periodic checkpoint is written (rank 0; Close waits for it, so before
// the worker regroups): the new node heals from memory, but a restart
// meanwhile (a node lost as the agents meet, the group that never forms)
// resumes from the file, whichever node's agent starts it first.
func (ck *Checkpointer) writeHeld(dev *xla.Device, path string, data []byte) {
	ck.writing.Add(1)
	keep := dev.Engine().KeepOpen()
	go func() {
		defer ck.writing.Done()
		defer keep()
		if ck.written = safetensors.WriteAtomic(path, data); ck.written == nil {
			ck.written = safetensors.SyncDir(ck.opts.Dir)
			ck.prune(plain)
		}
	}()
}

// noteHeld tells the agent that this process holds a step for a joining
// node (where says how): it then regroups the workers with that node.
func noteHeld(g *dist.ProcessGroup, where string) error {
	return workerenv.WritePeerLossNote(os.Getenv(workerenv.FlightDir), g.Rank(), workerenv.Held+where)
}

// heldForJoin is Step's error once every rank holds the step for a
// joining node: the training function returns it, and ddp.Run regroups
// the process with that node (it counts as a commit for regroup); a
// worker that exits instead exits ExitPreempted.
type heldForJoin struct {
	step  int
	where string
}

func (e heldForJoin) Error() string {
	return fmt.Sprintf("checkpoint: step %d is held %s for the node(s) joining the job: the job goes on with them from that step",
		e.step, e.where)
}
func (heldForJoin) Is(target error) bool      { return target == ErrPreempted }
func (heldForJoin) ExitStatus() int           { return ExitPreempted }
func (heldForJoin) CommittedOnPeerLoss() bool { return true }

// CommitHeld writes the step this process holds for a joining node, if
// any, into its checkpoint directory, atomically, and lets it go: a worker
// that does not regroup after all (its wait for a place failed, or was
// stopped) exits with it committed. It returns the path written ("" when
// nothing was held).
func CommitHeld() (string, error) {
	h := takeHeld(true)
	if h.step < 0 {
		return "", nil
	}
	err := safetensors.WriteAtomic(h.path, h.data)
	if err == nil {
		err = safetensors.SyncDir(filepath.Dir(h.path))
	}
	if err != nil {
		return "", fmt.Errorf("checkpoint: committing step %d, held for a joining node: %w", h.step, err)
	}
	return h.path, nil
}

// sizeOf says n bytes briefly.
func sizeOf(n int) string {
	if n < 1<<20 {
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}
