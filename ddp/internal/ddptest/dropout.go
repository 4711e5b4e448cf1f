package ddptest

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/ddp/checkpoint"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
)

// DropoutRun is one spawned training of DropoutSpawn.
type DropoutRun struct {
	Replicas int
	// Load is the checkpoint to resume from (none when empty); Save is
	// where the checkpoint of step SaveAt goes, with every replica's
	// random state.
	Load, Save    string
	SaveAt, Steps int
	// Optimizer builds the optimizer of the wrapped model (nil: SGD).
	Optimizer func(ctx context.Context, m *ddp.DistributedDataParallel) (optim.Optimizer, error)
	// LoadWith loads Load instead of checkpoint.Load (a test's variant).
	LoadWith func(ctx context.Context, path string, c *optim.Checkpoint) error
	// Checkpointer, when set, is the job's checkpointer instead: it
	// restores the latest checkpoint and gets every step; with TermAt,
	// replica 0 sends SIGTERM to the process after that step.
	Checkpointer *checkpoint.Options
	TermAt       int
}

// DropoutSpawn trains a wrapped MLP with dropout on every local replica
// of a spawned job (each replica's device seeded apart, as Spawn seeds
// them), each on its own data, as r says; it returns replica 0's final
// parameters.
func DropoutSpawn(t *testing.T, r DropoutRun) ([]float32, error) {
	final := make(chan []float32, 1)
	var ck *checkpoint.Checkpointer
	if r.Checkpointer != nil {
		var err error
		if ck, err = checkpoint.New(*r.Checkpointer); err != nil {
			return nil, err
		}
		defer ck.Close()
	}
	err := ddp.Spawn(t.Context(), func(ctx context.Context, w ddp.Worker) error {
		dw := &dropoutWorker{r: r, w: w, ck: ck}
		if err := dw.setUp(ctx); err != nil {
			return err
		}
		xs, ys := make([]float32, 4*10), make([]float32, 4*5)
		for step := dw.c.Step; step < r.Steps; step++ {
			if err := dw.step(ctx, step, xs, ys); err != nil {
				return err
			}
		}
		if w.Rank == 0 {
			v, err := nn.Parameters(dw.model)[0].Float32s(ctx)
			if err != nil {
				return err
			}
			final <- v
		}
		return nil
	}, ddp.SpawnOptions{Devices: r.Replicas, Device: backend.Options{Target: backend.CPU}})
	if err != nil {
		return nil, err
	}
	return <-final, nil
}

// dropoutWorker is a DropoutSpawn worker's training state.
type dropoutWorker struct {
	r     DropoutRun
	w     ddp.Worker
	ck    *checkpoint.Checkpointer // nil without r.Checkpointer
	model *ddp.DistributedDataParallel
	opt   optim.Optimizer
	c     optim.Checkpoint
}

// setUp builds the wrapped model and its optimizer, and resumes from
// r.Load and the checkpointer's latest checkpoint, where there are.
func (dw *dropoutWorker) setUp(ctx context.Context) error {
	d, r := dw.w.Device, dw.r
	l1, err1 := nn.NewLinear(d, nn.NewRand(7), 10, 16, true)
	l2, err2 := nn.NewLinear(d, nn.NewRand(8), 16, 5, true)
	drop, err3 := nn.NewDropout(0.5)
	if err := errors.Join(err1, err2, err3); err != nil {
		return err
	}
	model, err := ddp.Wrap(ctx, nn.NewSequential(l1, nn.ReLU{}, drop, l2))
	if err != nil {
		return err
	}
	var opt optim.Optimizer
	if r.Optimizer != nil {
		opt, err = r.Optimizer(ctx, model)
	} else {
		opt, err = optim.NewSGD(nn.Parameters(model), optim.SGDConfig{LR: 0.1})
	}
	if err != nil {
		return err
	}
	dw.model, dw.opt = model, opt
	dw.c = optim.Checkpoint{Model: model, Optimizer: opt, RNG: d}
	if r.Load != "" {
		load := checkpoint.Load
		if r.LoadWith != nil {
			load = r.LoadWith
		}
		if err := load(ctx, r.Load, &dw.c); err != nil {
			return err
		}
	}
	if dw.ck != nil {
		if _, err := dw.ck.Restore(ctx, &dw.c); err != nil {
			return err
		}
	}
	return nil
}

// step trains step on this rank's batch (filled into xs and ys), then
// gives the checkpointer the step (with r.TermAt's SIGTERM before it) and
// saves the checkpoint of r.SaveAt.
func (dw *dropoutWorker) step(ctx context.Context, step int, xs, ys []float32) error {
	d, r, w := dw.w.Device, dw.r, dw.w
	for i := range xs {
		xs[i] = float32((i*7+w.Rank*3+step)%11) / 11
	}
	for i := range ys {
		ys[i] = float32((i*5+w.Rank+step)%7) / 7
	}
	x, _ := xla.FromSlice(d, xs, 4, 10)
	y, _ := xla.FromSlice(d, ys, 4, 5)
	dw.opt.ZeroGrad()
	if err := optim.BackwardStep(ctx, nn.MSELoss(dw.model.Forward(x), y, nn.ReductionMean), dw.opt); err != nil {
		return err
	}
	if dw.ck != nil {
		if step+1 == r.TermAt && w.Rank == 0 {
			_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
			time.Sleep(50 * time.Millisecond) // delivered before the step's agreement
		}
		dw.c.Step = step + 1
		if err := dw.ck.Step(ctx, dw.c); err != nil {
			return err
		}
	}
	if step+1 == r.SaveAt {
		if err := checkpoint.Save(ctx, r.Save, optim.Checkpoint{Model: dw.model, Optimizer: dw.opt, Step: step + 1, RNG: d}); err != nil {
			return err
		}
	}
	return nil
}
