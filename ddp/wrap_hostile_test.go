package ddp_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/ddp/internal/ddptest"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
)

func init() { ddptest.Scenarios["wrap-hostile"] = wrapHostileScenario }

// wrapHostileCases are misuses of Wrap in a 2-process job; each runs on
// rank r and returns its error.
var wrapHostileCases = map[string]func(ctx context.Context, d *xla.Device, rank int) error{
	// Rank 1 never uses the middle layer: from the first step the ranks
	// average different gradient sets.
	"branch-by-rank": func(ctx context.Context, d *xla.Device, rank int) error {
		return trainBranch(ctx, d, func(step int) bool { return rank == 0 })
	},
	// The same, from step 3 on: the layout changes on one rank only.
	"branch-later": func(ctx context.Context, d *xla.Device, rank int) error {
		return trainBranch(ctx, d, func(step int) bool { return rank == 0 || step < 3 })
	},
	// A compiled step cannot hold the host cut.
	"compiled": func(ctx context.Context, d *xla.Device, rank int) error {
		m, err := wrapToy(ctx, d)
		if err != nil {
			return err
		}
		defer m.Close()
		step := xla.Compile(func(args ...*xla.Tensor) ([]*xla.Tensor, error) {
			loss, err := ddptest.LossOn(d, m, "toy", 0, 4)
			if err != nil {
				return nil, err
			}
			return nil, loss.Backward()
		})
		_, err = step.Run(ctx, d)
		return err
	},
	// Rank 1 also takes the gradient of a tensor unrelated to the
	// wrapped model (a saliency map): no collective may follow from it.
	"unrelated-backward": func(ctx context.Context, d *xla.Device, rank int) error {
		m, err := wrapToy(ctx, d)
		if err != nil {
			return err
		}
		defer m.Close()
		opt, err := optim.NewSGD(nn.Parameters(m), optim.SGDConfig{LR: 0.1})
		if err != nil {
			return err
		}
		for range 4 {
			opt.ZeroGrad()
			loss, err := ddptest.LossOn(d, m, "toy", 0, 4)
			if err != nil {
				return err
			}
			if err := loss.Backward(); err != nil {
				return err
			}
			if rank == 1 {
				x := d.RandN(xla.Float32, 3, 3)
				if err := x.SetRequiresGrad(true); err != nil {
					return err
				}
				if err := x.Mul(x).Sum().Backward(); err != nil {
					return err
				}
			}
			if err := opt.Step(); err != nil {
				return err
			}
			if err := d.MarkStep(ctx); err != nil {
				return err
			}
		}
		return nil
	},
	// The ranks wrap different models.
	"different-models": func(ctx context.Context, d *xla.Device, rank int) error {
		model, err := ddptest.NewModel(d, []string{"toy", "cnn"}[rank], 1, nil)
		if err != nil {
			return err
		}
		_, err = ddp.Wrap(ctx, model)
		return err
	},
	// The ctx given to Wrap ends during training: Backward's host
	// all-reduce stops at once with the cause instead of waiting.
	"cancelled": func(ctx context.Context, d *xla.Device, rank int) error {
		ctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		m, err := wrapToy(ctx, d)
		if err != nil {
			return err
		}
		defer m.Close()
		cancel(errors.New("the user gave up"))
		loss, err := ddptest.LossOn(d, m, "toy", 0, 4)
		if err != nil {
			return err
		}
		return loss.Backward()
	},
	// In-graph collectives would average each process's replicas only.
	"in-graph": func(ctx context.Context, d *xla.Device, rank int) error {
		model, err := ddptest.NewModel(d, "toy", 1, nil)
		if err != nil {
			return err
		}
		_, err = ddp.Wrap(ctx, model, ddp.WithCollectives(&ddp.InGraph{}))
		return err
	},
	// Only rank 0 wraps; rank 1 leaves the job.
	"subset": func(ctx context.Context, d *xla.Device, rank int) error {
		if rank == 1 {
			return dist.Destroy()
		}
		model, err := ddptest.NewModel(d, "toy", 1, nil)
		if err != nil {
			return err
		}
		_, err = ddp.Wrap(ctx, model)
		return err
	},
}

// wrapToy wraps a fresh toy model on d.
func wrapToy(ctx context.Context, d *xla.Device) (*ddp.DistributedDataParallel, error) {
	model, err := ddptest.NewModel(d, "toy", 1, nil)
	if err != nil {
		return nil, err
	}
	return ddp.Wrap(ctx, model)
}

// trainBranch trains "branch" for 6 steps with the middle layer used when
// useMid(step), without FindUnusedParameters.
func trainBranch(ctx context.Context, d *xla.Device, useMid func(step int) bool) error {
	step := 0
	model, err := ddptest.NewModel(d, "branch", 1, &step)
	if err != nil {
		return err
	}
	b := model.(*ddptest.Branchy)
	m, err := ddp.Wrap(ctx, model)
	if err != nil {
		return err
	}
	defer m.Close()
	opt, err := optim.NewSGD(nn.Parameters(m), optim.SGDConfig{LR: 0.1})
	if err != nil {
		return err
	}
	for i := range 6 {
		on := 1
		if useMid(i) {
			on = 0
		}
		b.Step = &on
		opt.ZeroGrad()
		loss, err := ddptest.LossOn(d, m, "toy", 0, 4)
		if err != nil {
			return err
		}
		if err := optim.BackwardStep(ctx, loss, opt); err != nil {
			return err
		}
	}
	return nil
}

func wrapHostileScenario(rep *ddptest.Report) {
	ctx := context.Background()
	e, done, err := ddptest.JoinJob(ctx, 1)
	if err != nil {
		rep.Error = err.Error()
		return
	}
	defer done()
	start := time.Now()
	err = wrapHostileCases[os.Getenv("XLADDP_TEST_CASE")](ctx, e.Device(0), dist.Rank())
	rep.Elapsed = time.Since(start).Seconds()
	if err != nil {
		rep.Errors = []string{err.Error()}
		if errors.Is(err, dist.ErrMismatch) {
			rep.Hashes["mismatch"] = "yes"
		}
	}
}

// TestWrapHostileAcrossProcesses: misuse across processes fails promptly
// (well before the 60 s timeout) on every rank involved, saying what went
// wrong, instead of hanging or averaging the wrong values.
func TestWrapHostileAcrossProcesses(t *testing.T) {
	cases := []struct {
		name string
		// want is what each rank's error says ("" for no error).
		want     [2]string
		mismatch bool
	}{
		{"branch-by-rank", [2]string{
			"gradient 2 is mid.weight Float32[10 10] on rank 0 but l2.weight Float32[5 10] on rank 1",
			"gradient 2 is l2.weight Float32[5 10] on rank 1 but mid.weight Float32[10 10] on rank 0"}, true},
		{"branch-later", [2]string{
			"gradient 2 is mid.weight Float32[10 10] on rank 0 but l2.weight Float32[5 10] on rank 1",
			"gradient 2 is l2.weight Float32[5 10] on rank 1 but mid.weight Float32[10 10] on rank 0"}, true},
		{"compiled", [2]string{"train with lazy steps (MarkStep) across processes", "train with lazy steps (MarkStep) across processes"}, false},
		{"subset", [2]string{"rank 1", ""}, false},
		{"in-graph", [2]string{"rank 0: WithCollectives(InGraph{}) averages over this process's 1 local replica(s) only, but the job spans 2 processes",
			"rank 1: WithCollectives(InGraph{})"}, false},
		{"cancelled", [2]string{"the user gave up", "the user gave up"}, false},
		{"different-models", [2]string{"ranks called different collectives", "ranks called different collectives"}, true},
		{"unrelated-backward", [2]string{"", ""}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cmds, outs := ddptest.Launch(t, "wrap-hostile", 2, "XLADDP_TEST_TIMEOUT=60s", "XLADDP_TEST_CASE="+c.name)
			for r, rep := range ddptest.WaitReports(t, cmds, outs) {
				require.Empty(t, rep.Error, "rank %d", r)
				assert.Less(t, rep.Elapsed, 20.0, "rank %d took %.1fs", r, rep.Elapsed)
				if c.want[r] == "" {
					assert.Empty(t, rep.Errors, "rank %d", r)
					continue
				}
				require.Len(t, rep.Errors, 1, "rank %d: no error", r)
				assert.Contains(t, rep.Errors[0], c.want[r], "rank %d", r)
				if c.mismatch {
					assert.Equal(t, "yes", rep.Hashes["mismatch"], "rank %d: not an ErrMismatch", r)
				}
			}
		})
	}
}
