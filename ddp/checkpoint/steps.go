package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strconv"

	"github.com/spf13/pflag"

	"github.com/xladdp/xladdp/xla/optim"
)

// AddFlags registers --checkpoint-dir (o.Dir) and --checkpoint-every
// (o.Every, default 100 steps; a negative count is refused as it is
// parsed) on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.Every = 100
	fs.StringVar(&o.Dir, "checkpoint-dir", "", "keep checkpoints here, one every --checkpoint-every steps and one at once on SIGTERM "+
		"(the job then exits 75); the same command run again resumes from the latest")
	fs.Func("checkpoint-every", "steps between --checkpoint-dir's checkpoints (0: only on SIGTERM) (default 100)", func(s string) error {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return fmt.Errorf("want a count of steps, 0 or more (0: only on SIGTERM)")
		}
		o.Every = n
		return nil
	})
	fs.StringSliceVar(&o.Override, "resume-override", nil, "settings a resume from --checkpoint-dir may change (their flag names, "+
		"comma-separated, e.g. lr); without it a changed setting is refused")
}

// Steps is a training loop's steps, 1 to last, kept in o.Dir (with no
// Dir, the steps alone): it restores the latest checkpoint into state,
// yields the steps left, and after each one runs a Checkpointer's Step
// with state (every o.Every steps, at once on SIGTERM) and commits the
// last step's, so that the directory ends with the final weights and the
// same command run again has nothing left to do. finish, called after the
// loop, returns what ended it: nil after step last, ErrPreempted after a
// preemption (ddp.Main then exits 75), else the error. A loop body that
// returns early closes the checkpointer too.
func Steps(ctx context.Context, o Options, last int, state optim.Checkpoint) (steps iter.Seq[int], finish func() error) {
	var err error
	ranged := false
	steps = func(yield func(int) bool) {
		if ranged {
			err = errors.New("checkpoint: Steps ranged over twice")
			return
		}
		ranged = true
		if last < 0 {
			err = fmt.Errorf("checkpoint: Steps to step %d: the last step cannot be negative", last)
			return
		}
		var ck *Checkpointer
		if o.Dir != "" {
			if ck, err = New(o); err != nil {
				return
			}
			defer func() { err = errors.Join(err, ck.Close()) }()
			if _, err = ck.Restore(ctx, &state); err != nil {
				return
			}
		}
		for state.Step < last {
			if !yield(state.Step + 1) {
				return
			}
			state.Step++
			if ck == nil {
				continue
			}
			if err = ck.step(ctx, state, state.Step == last); err != nil {
				return
			}
		}
	}
	return steps, func() error {
		if !ranged && err == nil {
			return errors.New("checkpoint: Steps' finish called before its steps were ranged over")
		}
		return err
	}
}
