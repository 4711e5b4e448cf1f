package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/ddp/checkpoint"
	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/ddp/training"
	"github.com/xladdp/xladdp/ddp/zero"
	"github.com/xladdp/xladdp/examples/internal/cmdline"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
)

// trainer is one replica's model, optimizer and data.
type trainer struct {
	c       config
	w       ddp.Worker
	text    *corpus
	net     *nn.GPT
	model   *ddp.DistributedDataParallel
	opt     optim.Optimizer
	sharded *zero.ZeroRedundancyOptimizer // with --zero: opt
	sched   optim.Scheduler
	perStep int // rows per replica per micro-step (a micro-shard's with --deterministic)
	global  int // rows per optimizer step over the job
	order   *order
	samples *cmdline.SampleLog // --sample-log
	loss    *xla.Tensor        // the last step's loss (this replica's)
	steps   int                // steps done since training began (keys a deterministic step's random state)
}

func newTrainer(ctx context.Context, c config, w ddp.Worker, text *corpus, out io.Writer) (*trainer, error) {
	t := &trainer{c: c, w: w, text: text}
	var err error
	if w.Mode.Deterministic {
		// Every replica reads the whole global batch's order and
		// computes its micro-shards of it.
		t.perStep, t.global = w.Mode.MicroShardFor(c.batch()), c.batchSize
		t.order, err = newOrder(len(text.train), c.model.BlockSize, c.seed, 1, 0, c.batchSize)
	} else {
		rows := cmdline.PerReplica(out, w.Rank == 0, c.batchSize, w.WorldSize*c.gradAccum,
			fmt.Sprintf("%d replicas × %d micro-steps (--grad-accum)", w.WorldSize, c.gradAccum))
		if rows < 1 {
			return nil, fmt.Errorf("--batch-size %d is less than one row per replica (%d) per micro-step (--grad-accum %d): raise it",
				c.batchSize, w.WorldSize, c.gradAccum)
		}
		t.perStep, t.global = rows, rows*w.WorldSize*c.gradAccum
		t.order, err = newOrder(len(text.train), c.model.BlockSize, c.seed, w.WorldSize, w.Rank, rows*c.gradAccum)
	}
	if err != nil {
		return nil, err
	}
	if t.net, err = nn.NewGPT(w.Device, nn.NewRand(c.seed), c.model); err != nil {
		return nil, err
	}
	if err := nn.SetComputeDType(t.net, c.computeDType()); err != nil {
		return nil, err
	}
	if t.model, err = w.Wrap(ctx, t.net, c.batch()); err != nil {
		return nil, err
	}
	groups := optim.DecayGroups(nn.NamedParameters(t.model), c.weightDecay)
	adamW := func(groups []optim.ParamGroup) (optim.Optimizer, error) {
		return optim.NewAdamWGroups(groups, optim.AdamConfig{LR: c.lr, Beta2: 0.99})
	}
	if c.zero {
		t.sharded, err = zero.New(ctx, t.model, groups, adamW)
		t.opt = t.sharded
	} else {
		t.opt, err = adamW(groups)
	}
	if err != nil {
		t.model.Close()
		return nil, err
	}
	if t.sched, err = optim.NewWarmupCosine(t.opt, c.warmup, c.steps, c.minLR); err != nil {
		t.model.Close()
		return nil, err
	}
	return t, nil
}

// upload puts a batch on the replica's device.
func (t *trainer) upload(ids, targets []int32, rows int) (x, y *xla.Tensor, err error) {
	if x, err = xla.FromSlice(t.w.Device, ids, rows, t.c.model.BlockSize); err != nil {
		return nil, nil, err
	}
	y, err = xla.FromSlice(t.w.Device, targets, rows*t.c.model.BlockSize)
	return x, y, err
}

// lossOf is the mean next-token cross-entropy (float32) of model on x, y.
func (t *trainer) lossOf(model nn.Module, x, y *xla.Tensor) *xla.Tensor {
	return nn.CrossEntropyLoss(model.Forward(x).Reshape(-1, t.c.model.Vocab), y, nn.ReductionMean)
}

// step records one optimizer step: --grad-accum micro-steps whose
// gradients accumulate locally (NoSync) but the last, whose Backward
// averages them across the replicas, then clipping, AdamW and the
// schedule, all in the step's program; it returns the step's mean loss.
func (t *trainer) step(ctx context.Context) (*xla.Tensor, error) {
	epoch, samples := t.order.take()
	t.opt.ZeroGrad()
	if t.model.Deterministic() {
		if err := t.backwardMicroShards(ctx, epoch, samples); err != nil {
			return nil, err
		}
		return t.update(ctx)
	}
	if err := t.samples.Add(epoch, samples); err != nil {
		return nil, err
	}
	var total *xla.Tensor
	for k := range t.c.gradAccum {
		ids, targets := windowsOf(t.text.train, samples[k*t.perStep:(k+1)*t.perStep], t.c.model.BlockSize)
		x, y, err := t.upload(ids, targets, t.perStep)
		if err != nil {
			return nil, err
		}
		loss := t.lossOf(t.model, x, y).DivScalar(float64(t.c.gradAccum))
		backward := func() error { return loss.Backward() }
		if k < t.c.gradAccum-1 {
			err = t.model.NoSync(backward)
		} else {
			err = backward()
		}
		if err != nil {
			return nil, err
		}
		if total == nil {
			total = loss.Detach()
		} else {
			total = total.Add(loss.Detach())
		}
	}
	t.loss = total
	return t.update(ctx)
}

// update clips, steps the optimizer and the schedule and runs the step's
// program; it returns the step's loss.
func (t *trainer) update(ctx context.Context) (*xla.Tensor, error) {
	if t.c.clip > 0 {
		var err error
		if t.sharded != nil {
			err = t.sharded.ClipGradNorm(t.c.clip, 2) // over every replica's shard, in Step
		} else {
			_, err = optim.ClipGradNorm(nn.Parameters(t.model), t.c.clip, 2)
		}
		if err != nil {
			return nil, err
		}
	}
	if err := t.opt.Step(); err != nil {
		return nil, err
	}
	t.sched.Step()
	return t.loss, t.w.Device.MarkStep(ctx)
}

// valLoss estimates the val loss on --eval-iters batches in eval mode
// (this replica's batches; every replica runs it, so replicas in one
// process stay in step), reading the device once.
func (t *trainer) valLoss(ctx context.Context, it int) (float64, error) {
	defer dist.Current().Busy("evaluating")()
	nn.Eval(t.net)
	defer nn.Train(t.net)
	rng := rand.New(rand.NewPCG(t.c.seed^0x7661, uint64(t.w.Rank)<<40|uint64(it)))
	var sum *xla.Tensor
	for range t.c.evalIters {
		ids, targets, err := batch(rng, t.text.val, t.perStep, t.c.model.BlockSize)
		if err != nil {
			return 0, err
		}
		x, y, err := t.upload(ids, targets, t.perStep)
		if err != nil {
			return 0, err
		}
		loss := t.lossOf(t.net, x, y).Detach()
		if sum == nil {
			sum = loss
		} else {
			sum = sum.Add(loss)
		}
		if err := t.w.Device.MarkStep(ctx); err != nil {
			return 0, err
		}
	}
	v, err := sum.Item(ctx)
	return v / float64(t.c.evalIters), err
}

// train is one replica's run; rank 0 reports.
func train(ctx context.Context, c config, w ddp.Worker, text *corpus, out io.Writer) (res result, err error) {
	t, err := newTrainer(ctx, c, w, text, out)
	if err != nil {
		return res, err
	}
	defer t.model.Close()
	shape := fmt.Sprintf("%+v", c.model)
	loop, err := c.OpenLoop(ctx, w, t.order, optim.Checkpoint{Model: t.model, Optimizer: t.opt, RNG: w.Device, Metadata: map[string]string{"gpt": shape}}, out)
	if err != nil {
		return res, err
	}
	defer func() { err = loop.End(ctx, err) }()
	if t.samples, err = cmdline.OpenSampleLog(c.sampleLog, w.Rank); err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, t.samples.Close()) }()
	first := loop.State().Step // the steps of this run start here
	if loop.Resumed() != "" {
		done, err := t.resume(loop, shape)
		if err != nil || done {
			if done {
				res, err = finished(ctx, t, loop.State(), w.Rank == 0, out)
			}
			return res, err
		}
		res.ResumedAt = first
	}
	t.describe(out)
	log := newLossLog(t, out, first, &res)
	start := time.Now()
	for it := first; it < c.steps; it++ {
		loss, err := t.step(ctx)
		if err == nil {
			res.Steps = it + 1
			// Committed before the log's eval, which crosses replicas: a
			// peer lost there finds the step the loop's (Loop.End).
			err = loop.Commit(ctx, t.order.position(it+1)) // checkpoint.ErrPreempted: exit 75
		}
		if err == nil {
			err = log.step(ctx, loop, loss, it+1)
		}
		if err != nil {
			return res, err
		}
	}
	log.progress.Done()
	res.Trained = time.Since(start)
	res.TokensPerSec = float64((res.Steps-first)*t.global*c.model.BlockSize) / max(res.Trained.Seconds(), 1e-9)
	err = t.finish(ctx, out, &res, &log.curves)
	return res, err
}

// resume checks the checkpoint the loop resumed from and moves the
// schedule and the data order to its step; done is a checkpoint of the
// last step of a job that finished.
func (t *trainer) resume(loop *training.Loop, shape string) (done bool, err error) {
	ck, c := loop.State(), t.c
	if got := ck.Metadata["gpt"]; got != shape {
		return false, fmt.Errorf("%s: it holds a GPT %s, this run builds %s: give the same --size, --layers, --heads, --width, --block, --dropout and --data",
			loop.Resumed(), got, shape)
	}
	// --checkpoint-dir at the last step is a job that ended (or was
	// preempted) as it finished: the same command run again finishes.
	if ck.Step > c.steps || (ck.Step == c.steps && c.Resume) {
		return false, fmt.Errorf("%s: it is at step %d, and --steps is %d: nothing to train; raise --steps", loop.Resumed(), ck.Step, c.steps)
	}
	if ck.Step == c.steps {
		return true, nil
	}
	for range ck.Step {
		t.sched.Step() // the learning rate of the step it resumes at
	}
	t.steps = ck.Step
	if c.Resume { // a --resume file holds the step alone
		at := t.order.afterSteps(ck.Step)
		return false, t.order.ResumeAt(at.Epoch, at.Samples)
	}
	return false, nil
}

// finished ends a run whose --checkpoint-dir holds its last step: it
// trains nothing, writes --checkpoint from that state (a job preempted
// as it saved its last step has it, but nothing else proves it), and
// says so rather than printing losses no step of this run measured.
func finished(ctx context.Context, t *trainer, ck optim.Checkpoint, rank0 bool, out io.Writer) (result, error) {
	res := result{ResumedAt: ck.Step, Steps: ck.Step}
	if t.c.Checkpoint != "" {
		if err := checkpoint.Save(ctx, t.c.Checkpoint, ck); err != nil {
			return res, err
		}
	}
	if rank0 {
		fmt.Fprintf(out, "done: --checkpoint-dir %s is at step %d of %d: training had finished, nothing left to train\n", t.c.launch.Checkpoints.Dir, ck.Step, t.c.steps)
	}
	return res, nil
}
