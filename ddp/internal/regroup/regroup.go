package regroup

// The in-graph device path across processes (Neuron's collectives, a
// future NCCL) could not continue in place: its communicators are the
// plugin's, formed with the client for a fixed world, and a Neuron
// runtime is set up once a process; such a worker restarts instead.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/xladdp/xladdp/internal/workerenv"
)

// Ends counts how a process's replicas ended one pass.
type Ends struct{ started, committed atomic.Int32 }

// Count wraps a replica's function to count its end.
func Count[W any](e *Ends, fn func(ctx context.Context, w W) error) func(ctx context.Context, w W) error {
	return func(ctx context.Context, w W) error {
		e.started.Add(1)
		err := fn(ctx, w)
		if CommittedOnPeerLoss(err) {
			e.committed.Add(1)
		}
		return err
	}
}

// AllCommitted reports whether every replica that started committed
// after a peer's loss.
func (e *Ends) AllCommitted() bool {
	n := e.started.Load()
	return n > 0 && e.committed.Load() == n
}

// CommittedOnPeerLoss reports whether err is a training loop's end after
// it committed on a peer's loss (training.Loop.End).
func CommittedOnPeerLoss(err error) bool {
	var c interface{ CommittedOnPeerLoss() bool }
	return errors.As(err, &c) && c.CommittedOnPeerLoss()
}

// Group is how the pass's process group was formed, and on what.
type Group struct {
	// Regroups: formed from the environment (env://) over tcp, on a
	// target whose client this process can create again (cpu, cuda; a
	// Neuron runtime is set up once a process and holds its NeuronCores
	// until it exits). Only such a group regroups in place.
	Regroups bool
	// Timeout bounds the wait for the agent's assignment.
	Timeout time.Duration
}

// active: the pass now running is in a group that regroups in place
// under ddprun (SetActive).
var active atomic.Bool

// SetActive says whether the pass now running regroups in place (its
// Group's Regroups, under ddprun with a regroup directory): a
// checkpointer then offers to hold a step for a joining node.
func SetActive(on bool) { active.Store(on && os.Getenv(workerenv.RegroupDir) != "") }

// Active reports whether this process's pass regroups in place.
func Active() bool { return active.Load() }

// InPlace waits for ddprun's assignment after a peer's loss (or once the
// process held a step for a joining node) and places this process by it, saying so on log. It returns false, and the worker
// exits with its commit (ddprun restarts it), where ddprun gave no
// regroup directory (--restart_on_peer_loss, another launcher) or g
// cannot regroup.
func InPlace(ctx context.Context, g Group, log io.Writer) (bool, error) {
	dir := os.Getenv(workerenv.RegroupDir)
	if dir == "" || !g.Regroups {
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
	env, err := workerenv.AwaitRegroup(ctx, dir, w.LocalRank, w.RestartCount, g.Timeout)
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
	how := "without the lost peer"
	if strings.HasPrefix(what, workerenv.Held) {
		how = "with the joining node(s)"
	}
	fmt.Fprintf(log, "ddp: rank %d regrouped in place %s: process %d goes on as rank %d of %d (round %d)\n",
		w.Rank, how, os.Getpid(), now.Rank, now.WorldSize, now.RestartCount)
	return true, nil
}

// Failed is a worker's commit whose regroup failed, or was stopped
// (Stopped: ddprun stopped it while it waited): it still exits
// ExitPreempted, and the job resumes from the commit.
type Failed struct {
	Commit, Why error
	Stopped     bool
}

func (e Failed) Error() string {
	if e.Stopped {
		return fmt.Sprintf("%v; stopped while it waited for its place (%v): the commit stands, and the same command resumes from it",
			e.Commit, e.Why)
	}
	return fmt.Sprintf("%v; it could not regroup in place (%v)", e.Commit, e.Why)
}
func (e Failed) Unwrap() error { return e.Commit }
func (Failed) ExitStatus() int { return workerenv.ExitPreempted }
