package ddp

// Live continuation after a peer's loss, on the host path: a worker of
// ddprun's whose every replica committed the last step it completed
// (training.Loop.End) does not exit. It waits for its agent's next
// assignment, the job's place for it without the lost node, and runs the
// training function again in the same process, which resumes from that
// commit at the smaller world size. The in-graph device path cannot do
// this: its collectives are the plugin's, formed when the client is
// created, and a Neuron runtime is set up once a process.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/internal/workerenv"
)

// replicaEnds counts how this process's replicas ended one pass of Run.
type replicaEnds struct{ started, committed atomic.Int32 }

// count wraps fn to count its ends.
func (e *replicaEnds) count(fn func(ctx context.Context, w Worker) error) func(ctx context.Context, w Worker) error {
	return func(ctx context.Context, w Worker) error {
		e.started.Add(1)
		err := fn(ctx, w)
		if committedOnPeerLoss(err) {
			e.committed.Add(1)
		}
		return err
	}
}

// allCommitted reports whether every replica that started committed
// after a peer's loss.
func (e *replicaEnds) allCommitted() bool {
	n := e.started.Load()
	return n > 0 && e.committed.Load() == n
}

// committedOnPeerLoss reports whether err is a training loop's end after
// it committed on a peer's loss (training.Loop.End).
func committedOnPeerLoss(err error) bool {
	var c interface{ CommittedOnPeerLoss() bool }
	return errors.As(err, &c) && c.CommittedOnPeerLoss()
}

// regroupInPlace waits for ddprun's assignment after a peer's loss and
// places this process by it. It returns false, and this worker exits
// with its commit (ddprun restarts it), where ddprun gave no regroup
// directory (--restart_on_peer_loss, another launcher) or the group was
// not formed from the environment over tcp.
func regroupInPlace(ctx context.Context, initMethod string, group groupSettings) (bool, error) {
	dir := os.Getenv(workerenv.RegroupDir)
	if dir == "" || initMethod != "env://" || group.transport != dist.TransportTCP {
		return false, nil
	}
	w, err := workerenv.Parse(os.Getenv)
	if err != nil || w.Rank == workerenv.Unset || w.LocalRank == workerenv.Unset || w.RestartCount == workerenv.Unset {
		return false, err
	}
	flightDir := os.Getenv(workerenv.FlightDir)
	what, _ := strings.CutPrefix(workerenv.ReadPeerLossNote(flightDir, w.Rank), workerenv.Committed)
	if err := workerenv.WritePeerLossNote(flightDir, w.Rank, workerenv.Regrouping+what); err != nil {
		return false, err
	}
	env, err := workerenv.AwaitRegroup(ctx, dir, w.LocalRank, w.RestartCount, group.timeout)
	if err != nil {
		return false, fmt.Errorf("rank %d: %w", w.Rank, err)
	}
	for _, kv := range env {
		name, value, _ := strings.Cut(kv, "=")
		if err := os.Setenv(name, value); err != nil {
			return false, err
		}
	}
	now, err := workerenv.Parse(os.Getenv)
	if err != nil {
		return false, err
	}
	fmt.Fprintf(os.Stderr, "ddp: rank %d regrouped in place without the lost peer: process %d goes on as rank %d of %d (round %d)\n",
		w.Rank, os.Getpid(), now.Rank, now.WorldSize, now.RestartCount)
	return true, nil
}

// groupSettings are what a pass's group was formed with.
type groupSettings struct {
	transport string
	timeout   time.Duration
}

// regroupFailed is a worker's commit whose regroup failed: it still
// exits ExitPreempted, and ddprun restarts the job from the commit.
type regroupFailed struct{ commit, why error }

func (e regroupFailed) Error() string {
	return fmt.Sprintf("%v; it could not regroup in place (%v)", e.commit, e.why)
}
func (e regroupFailed) Unwrap() error { return e.commit }
func (regroupFailed) ExitStatus() int { return workerenv.ExitPreempted }
