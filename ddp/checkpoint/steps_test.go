package checkpoint_test

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/ddp/checkpoint"
	"github.com/xladdp/xladdp/ddp/internal/ddptest"
	"github.com/xladdp/xladdp/ddp/internal/termination"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
	"github.com/xladdp/xladdp/xla/xlatest"
)

// TestStepsLoop: Steps yields the steps left and keeps them: with no
// directory the steps alone; with one, the last step committed whatever
// --checkpoint-every says, so a second run resumes there and has nothing
// left; a body that returns early releases SIGTERM; SIGTERM inside the
// loop commits that step and ends it with ErrPreempted; finish before
// the loop, a second range and a negative last step are errors.
func TestStepsLoop(t *testing.T) {
	ctx := xlatest.Context(t)
	d := xlatest.NewEngine(t, 1).Device(0)
	model, err := ddptest.NewModel(d, "toy", 3, nil)
	require.NoError(t, err)
	opt, err := optim.NewSGD(nn.Parameters(model), optim.SGDConfig{LR: 0.1})
	require.NoError(t, err)
	state := optim.Checkpoint{Model: model, Optimizer: opt, RNG: d}
	train := func(step int) {
		opt.ZeroGrad()
		require.NoError(t, optim.BackwardStep(ctx, nn.Parameters(model)[0].Square().Sum(), opt))
	}
	collect := func(o checkpoint.Options, last int, body func(step int) bool) ([]int, error) {
		steps, finish := checkpoint.Steps(ctx, o, last, state)
		var got []int
		for step := range steps {
			got = append(got, step)
			train(step)
			if !body(step) {
				break
			}
		}
		return got, finish()
	}
	all := func(int) bool { return true }

	got, err := collect(checkpoint.Options{}, 3, all)
	require.NoError(t, err)
	assert.Equal(t, []int{1, 2, 3}, got, "no directory: the steps alone")

	dir := t.TempDir()
	got, err = collect(checkpoint.Options{Dir: dir, Every: 4}, 6, all)
	require.NoError(t, err)
	assert.Equal(t, []int{1, 2, 3, 4, 5, 6}, got)
	assert.FileExists(t, filepath.Join(dir, "step-000000000006.safetensors"), "the last step is committed")
	got, err = collect(checkpoint.Options{Dir: dir, Every: 4}, 6, all)
	require.NoError(t, err)
	assert.Empty(t, got, "run again, the job has nothing left")
	got, err = collect(checkpoint.Options{Dir: dir, Every: 4}, 8, all)
	require.NoError(t, err)
	assert.Equal(t, []int{7, 8}, got, "a longer run resumes after the last step")

	held := termination.Holds()
	got, err = collect(checkpoint.Options{Dir: t.TempDir()}, 5, func(step int) bool { return step < 2 })
	require.NoError(t, err)
	assert.Equal(t, []int{1, 2}, got)
	assert.Equal(t, held+1, termination.Holds())
	assert.False(t, termination.Held(), "a body that breaks out releases SIGTERM")

	preempted := t.TempDir()
	delivered := make(chan os.Signal, 1)
	signal.Notify(delivered, syscall.SIGTERM)
	defer signal.Stop(delivered)
	got, err = collect(checkpoint.Options{Dir: preempted, Every: 100}, 30, func(step int) bool {
		if step == 3 {
			require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
			<-delivered
			time.Sleep(50 * time.Millisecond) // the checkpointer's own handler
		}
		return true
	})
	assert.ErrorIs(t, err, checkpoint.ErrPreempted)
	require.NotEmpty(t, got)
	last := got[len(got)-1]
	assert.True(t, last >= 3 && last < 30, "the notice stops the loop at its step (or, on a loaded machine, a step or two later): %v", got)
	assert.Equal(t, filepath.Join(preempted, fmt.Sprintf("step-%012d.safetensors", last)), lastStepFile(t, preempted),
		"the step the loop stopped at is committed")

	steps, finish := checkpoint.Steps(ctx, checkpoint.Options{Dir: t.TempDir()}, -1, state)
	for range steps {
		t.Fatal("no step to a negative last step")
	}
	assert.ErrorContains(t, finish(), "the last step cannot be negative")

	steps, finish = checkpoint.Steps(ctx, checkpoint.Options{}, 2, state)
	assert.ErrorContains(t, finish(), "before its steps were ranged over")
	for range steps {
	}
	for range steps {
		t.Fatal("a second range yields nothing")
	}
	assert.ErrorContains(t, finish(), "ranged over twice")
	assert.False(t, errors.Is(finish(), checkpoint.ErrPreempted))
}

// lastStepFile is the newest step file in dir.
func lastStepFile(t *testing.T, dir string) string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "step-*.safetensors"))
	require.NoError(t, err)
	require.NotEmpty(t, names, "no checkpoint in %s", dir)
	return names[len(names)-1]
}

// TestCheckpointFlags: --checkpoint-dir and --checkpoint-every fill the
// options; every defaults to 100; a negative or non-numeric count is
// refused as it is parsed.
func TestCheckpointFlags(t *testing.T) {
	tests := []struct {
		args    []string
		want    checkpoint.Options
		wantErr string
	}{
		{nil, checkpoint.Options{Every: 100}, ""},
		{[]string{"--checkpoint-dir", "ck", "--checkpoint-every", "0"}, checkpoint.Options{Dir: "ck"}, ""},
		{[]string{"--checkpoint-every", "-1"}, checkpoint.Options{}, "want a count of steps, 0 or more"},
		{[]string{"--checkpoint-every", "1e3"}, checkpoint.Options{}, "want a count of steps, 0 or more"},
	}
	for _, tt := range tests {
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		var o checkpoint.Options
		o.AddFlags(fs)
		err := fs.Parse(tt.args)
		if tt.wantErr != "" {
			assert.ErrorContains(t, err, tt.wantErr, "%v", tt.args)
			continue
		}
		require.NoError(t, err)
		assert.Equal(t, tt.want, o, "%v", tt.args)
	}
}
