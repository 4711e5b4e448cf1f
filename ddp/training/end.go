package training

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/xladdp/xladdp/ddp/checkpoint"
	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/internal/workerenv"
)

// salvageWait bounds End's commit: a disk that does not take the file
// within it leaves the job to its last periodic checkpoint.
const salvageWait = 5 * time.Minute

// End closes the loop after training stopped with err (nil when it
// ended). When err is a peer's loss in a collective (dist.PeerLost: its
// process or node died, or it stopped answering within the group's
// timeout), the loop first commits the last step this replica completed
// (Checkpointer.Salvage: no step is applied before its gradients were
// combined on every rank, so that state is the job's), says so in its
// log and its note to ddprun, and returns an error that is
// checkpoint.ErrPreempted: ddp.Run regroups this worker in place, or it
// exits 75 and ddprun restarts the job without the lost node from that
// step. Every replica calls it (a
// deferred call in the program: err = loop.End(ctx, err)). The last step
// completed is the loop's position, or the step after it when the Feed
// trained that one (Feed.TrainStep returned) before the program stopped;
// a program that applies its updates itself must Commit each step before
// anything else that crosses replicas.
func (l *Loop) End(ctx context.Context, err error) error {
	if err == nil {
		err, l.err = l.err, nil // the last step's commit's
	}
	if err == nil || l.ck == nil || !dist.PeerLost(err) || errors.Is(err, checkpoint.ErrPreempted) {
		return errors.Join(err, l.Close())
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), salvageWait)
	defer cancel()
	if f, ok := l.order.(interface{ Trained() int }); ok && f.Trained() == l.at.Step+1 && l.next.Step == l.at.Step+1 {
		// The step yielded last trained (its update applied) before the
		// program stopped, short of the loop's commit.
		l.at = l.next
	}
	step := l.at.Step
	noteErr := workerenv.WritePeerLossNote(l.flightDir, l.process, fmt.Sprintf("%sstep %d", workerenv.Committing, step))
	state := l.stateAt(l.at)
	state.Metadata[metaLoss] = fmt.Sprintf("rank %d lost a peer (%s)", l.rank, lossOf(err))
	path, salvageErr := l.ck.Salvage(ctx, state)
	if salvageErr != nil {
		return errors.Join(err, fmt.Errorf("training: rank %d lost a peer and could not commit step %d, the last it completed: %w", l.rank, step, salvageErr),
			l.Close())
	}
	what := fmt.Sprintf("a peer was lost (%v) after step %d, the last this replica completed; committed: %s", err, step, path)
	noteErr = errors.Join(noteErr, workerenv.WritePeerLossNote(l.flightDir, l.process, workerenv.Committed+what))
	if noteErr != nil {
		what += fmt.Sprintf(" (the note to ddprun: %v)", noteErr)
	}
	return errors.Join(committedOnLoss(fmt.Sprintf("training: rank %d: %s; ddprun goes on from there without the lost node (while --max_restarts leaves a restart)", l.rank, what)), l.Close())
}

// committedOnLoss is End's error once it committed: it is
// checkpoint.ErrPreempted (the worker exits 75), said without a
// preemption's words.
type committedOnLoss string

func (e committedOnLoss) Error() string      { return string(e) }
func (committedOnLoss) Is(target error) bool { return target == checkpoint.ErrPreempted }
func (committedOnLoss) ExitStatus() int      { return workerenv.ExitPreempted }

// CommittedOnPeerLoss marks the end ddp.Run regroups in place after.
func (committedOnLoss) CommittedOnPeerLoss() bool { return true }

// lossOf says which peer err lost and how, briefly ("rank 2 in
// AllReduce #21: connection closed"): the resumed run prints it.
func lossOf(err error) string {
	var pe *dist.PeerError
	if !errors.As(err, &pe) {
		return "the process group broke"
	}
	how := "failed"
	switch {
	case errors.Is(pe, dist.ErrPeerClosed):
		how = "connection closed"
	case errors.Is(pe, dist.ErrTimeout):
		how = "timed out"
	}
	return fmt.Sprintf("rank %d in %s: %s", pe.Rank, pe.Op, how)
}
