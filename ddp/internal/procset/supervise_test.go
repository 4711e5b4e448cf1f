package procset

import (
	"context"
	"errors"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/ddp/internal/termination"
	"github.com/xladdp/xladdp/ddp/internal/workertest"
	"github.com/xladdp/xladdp/internal/workerenv"
)

// syncBuffer collects a process's output.
type syncBuffer = workertest.Output

func shells(scripts ...string) []*exec.Cmd {
	cmds := make([]*exec.Cmd, len(scripts))
	for i, s := range scripts {
		cmds[i] = exec.Command("sh", "-c", s)
	}
	return cmds
}

// The hostile cases of the supervisor ddp.Spawn uses: nothing to run, a
// command that cannot start, failures gathered then the rest stopped, a
// grandchild holding the pipes, and a cancelled ctx.
func TestSupervise(t *testing.T) {
	ctx := t.Context()
	t.Run("nothing", func(t *testing.T) {
		failed, err := Supervise(ctx, nil, &syncBuffer{}, &syncBuffer{}, time.Second)
		assert.NoError(t, err)
		assert.Empty(t, failed)
	})
	t.Run("cannot start", func(t *testing.T) {
		cmds := append(shells("sleep 30"), exec.Command("/nonexistent/program"))
		start := time.Now()
		_, err := Supervise(ctx, cmds, &syncBuffer{}, &syncBuffer{}, time.Second)
		assert.ErrorContains(t, err, "starting process 1")
		assert.Less(t, time.Since(start), 5*time.Second, "the started one was stopped")
	})
	t.Run("failures gathered, the rest stopped", func(t *testing.T) {
		out := &syncBuffer{}
		start := time.Now()
		failed, err := Supervise(ctx, shells("echo zero; exit 0", "sleep 0.1; exit 3", "sleep 0.2; exit 4", "sleep 60"),
			out, &syncBuffer{}, time.Second)
		require.NoError(t, err)
		require.Len(t, failed, 2)
		assert.Equal(t, []int{1, 2}, []int{failed[0].Index, failed[1].Index})
		var exit *exec.ExitError
		require.True(t, errors.As(failed[0].Err, &exit))
		assert.Equal(t, 3, exit.ExitCode())
		assert.Less(t, time.Since(start), 10*time.Second, "the sleeper was stopped a grace after the first failure")
		assert.Contains(t, out.String(), "zero")
	})
	t.Run("a grandchild holds the pipes", func(t *testing.T) {
		start := time.Now()
		failed, err := Supervise(ctx, shells("sleep 40 & exit 0"), &syncBuffer{}, &syncBuffer{}, time.Second)
		require.NoError(t, err)
		assert.Empty(t, failed)
		assert.Less(t, time.Since(start), 5*time.Second)
	})
	t.Run("cancelled", func(t *testing.T) {
		cause := errors.New("the user pressed ^C")
		cctx, cancel := context.WithCancelCause(ctx)
		time.AfterFunc(200*time.Millisecond, func() { cancel(cause) })
		start := time.Now()
		_, err := Supervise(cctx, shells("sleep 60", "trap '' TERM; sleep 60"), &syncBuffer{}, &syncBuffer{}, time.Second)
		assert.ErrorIs(t, err, cause)
		assert.Less(t, time.Since(start), StopGrace+5*time.Second, "one that ignores SIGTERM is killed")
	})
	// SIGTERM to the parent is a preemption notice: the processes get it
	// with time to checkpoint (here 4 s, past StopGrace), and a job that
	// all stopped with 0 or 75 is preempted.
	checkpointing := "trap 'sleep 4; exit 75' TERM; sleep 60 & wait"
	t.Run("terminated, every process checkpoints", func(t *testing.T) {
		t.Parallel()
		cctx, cancel := context.WithCancelCause(ctx)
		time.AfterFunc(300*time.Millisecond, func() { cancel(termination.ErrTerminated) })
		failed, err := Supervise(cctx, shells(checkpointing, checkpointing, "exit 0"), &syncBuffer{}, &syncBuffer{}, time.Second)
		assert.ErrorIs(t, err, workerenv.ErrPreempted)
		assert.Empty(t, failed)
	})
	t.Run("terminated, one process fails instead", func(t *testing.T) {
		t.Parallel()
		cctx, cancel := context.WithCancelCause(ctx)
		time.AfterFunc(300*time.Millisecond, func() { cancel(termination.ErrTerminated) })
		_, err := Supervise(cctx, shells(checkpointing, "trap 'exit 1' TERM; sleep 60 & wait"), &syncBuffer{}, &syncBuffer{}, time.Second)
		assert.ErrorIs(t, err, termination.ErrTerminated)
		assert.NotErrorIs(t, err, workerenv.ErrPreempted)
	})
	t.Run("every process checkpointed on its own", func(t *testing.T) {
		failed, err := Supervise(ctx, shells("exit 75", "sleep 0.2; exit 75"), &syncBuffer{}, &syncBuffer{}, time.Second)
		assert.ErrorIs(t, err, workerenv.ErrPreempted)
		assert.Empty(t, failed)
	})
}
