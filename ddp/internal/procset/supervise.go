package procset

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"time"

	"github.com/xladdp/xladdp/ddp/internal/termination"
	"github.com/xladdp/xladdp/internal/workerenv"
)

// Failure is a supervised process that did not succeed.
type Failure struct {
	// Index is the process's position in Supervise's commands.
	Index int
	// Err is what waiting for it returned (an *exec.ExitError).
	Err error
}

// Supervise runs cmds as ddprun runs its workers (ddp.Spawn's processes): each in its own process
// group, killed if this process dies, its output copied to stdout and
// stderr through pipes of our own (a grandchild holding them cannot keep
// Supervise waiting). It returns once all have exited; after the first
// failure it waits grace for the failures that one caused, then stops the
// rest (SIGTERM, then SIGKILL) and returns the failures seen, in index
// order. When ctx ends it stops them all and returns ctx's cause; ended
// by SIGTERM (termination.ErrTerminated), it gives them PreemptGrace to
// checkpoint. A job whose processes all exited 0 or ExitPreempted, one at
// least with the latter, returns workerenv.ErrPreempted.
func Supervise(ctx context.Context, cmds []*exec.Cmd, stdout, stderr io.Writer, grace time.Duration) ([]Failure, error) {
	set := NewSet(len(cmds))
	for i, cmd := range cmds {
		if err := set.Start(NewProcess(cmd, i, i), stdout, stderr); err != nil {
			set.Stop(StopGrace)
			return nil, fmt.Errorf("starting process %d: %w", i, err)
		}
	}
	var failed []Failure
	var gathered <-chan time.Time
	for left := len(cmds); left > 0; {
		select {
		case w := <-set.Exits:
			left--
			if w.WaitErr != nil {
				failed = append(failed, Failure{Index: w.Rank, Err: w.WaitErr})
				if gathered == nil {
					gathered = time.After(grace)
				}
			}
			continue
		case <-ctx.Done():
			if !errors.Is(context.Cause(ctx), termination.ErrTerminated) {
				set.Stop(StopGrace)
				return nil, context.Cause(ctx)
			}
			// SIGTERM: a preemption notice, passed on with the time a
			// checkpointing process needs to finish its step and commit.
			set.Stop(PreemptGrace)
			if set.Preempted() {
				return nil, fmt.Errorf("every process stopped on SIGTERM: %w", workerenv.ErrPreempted)
			}
			return nil, context.Cause(ctx)
		case <-gathered:
		}
		break
	}
	set.Stop(StopGrace) // the rest after a failure; otherwise only waits for the output
	if set.Preempted() {
		return nil, fmt.Errorf("every process checkpointed and stopped: %w", workerenv.ErrPreempted)
	}
	slices.SortFunc(failed, func(a, b Failure) int { return a.Index - b.Index })
	return failed, nil
}
