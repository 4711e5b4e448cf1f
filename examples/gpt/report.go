package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/xladdp/xladdp/ddp/checkpoint"
	"github.com/xladdp/xladdp/ddp/training"
	"github.com/xladdp/xladdp/examples/internal/report"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
)

// describe is rank 0's first lines: the model, the batch and the
// schedule.
func (t *trainer) describe(out io.Writer) {
	c, w := t.c, t.w
	if w.Rank != 0 {
		return
	}
	fmt.Fprintf(out, "training a %d-layer, %d-head, %d-wide GPT (%d parameters, %d characters of vocabulary, block %d) on %d replicas (%s), %s\n",
		c.model.Layers, c.model.Heads, c.model.Width, nn.NumParameters(t.net), c.model.Vocab, c.model.BlockSize, w.WorldSize, w.Device, c.precision)
	split := fmt.Sprintf("%d replicas × %d micro-steps × %d rows", w.WorldSize, c.gradAccum, t.perStep)
	if w.Mode.Deterministic {
		split = fmt.Sprintf("deterministic: %d micro-shards of %d rows, summed in one order at any world size", c.batchSize/t.perStep, t.perStep)
	}
	fmt.Fprintf(out, "global batch %d = %s; AdamW lr %.3g → %.3g (warmup %d, cosine to step %d), clip %g; %d train / %d val characters\n",
		t.global, split, c.lr, c.minLR, c.warmup, c.steps, c.clip, len(t.text.train), len(t.text.val))
	if t.sharded != nil {
		fmt.Fprintf(out, "ZeRO-1: AdamW state and fp32 master weights sharded over the %d replicas\n", w.WorldSize)
	}
}

// lossLog is what the run reads of its losses: the train loss every
// --log-interval steps, read one step late so that the host never waits
// for a running program, and the val loss every --eval-interval.
type lossLog struct {
	t        *trainer
	res      *result
	curves   report.Curves
	progress *report.Progress // rank 0's
	first    int              // the step this run started at
	logged   *xla.Tensor      // a loss kept to read, of step loggedAt
	loggedAt int
}

func newLossLog(t *trainer, out io.Writer, first int, res *result) *lossLog {
	l := &lossLog{t: t, res: res, curves: report.Curves{Title: "char GPT"}, first: first}
	if t.w.Rank == 0 {
		l.progress = report.NewProgress(out, "steps", t.c.steps-first, t.c.LogInterval)
		l.progress.Unit = "tokens"
	}
	return l
}

// read reads the kept loss, if any.
func (l *lossLog) read(ctx context.Context) error {
	if l.logged == nil {
		return nil
	}
	v, err := l.logged.Item(ctx)
	if err != nil {
		return err
	}
	c := l.t.c
	l.res.TrainLoss = v
	l.res.Losses = append(l.res.Losses, [2]float64{float64(l.loggedAt), v})
	l.curves.AddLoss(l.loggedAt, v)
	l.progress.Step(l.loggedAt-l.first, v, c.LogInterval*c.batchSize*c.model.BlockSize)
	l.logged = nil
	return nil
}

// step follows step done (its loss): the last kept loss is read, this one
// kept when due, and an eval step reads it at once, measures the val loss
// and exports --checkpoint.
func (l *lossLog) step(ctx context.Context, loop *training.Loop, loss *xla.Tensor, done int) error {
	if err := l.read(ctx); err != nil {
		return err
	}
	c := l.t.c
	eval := done%c.evalInterval == 0 || done == c.steps
	// An eval line says the train loss of its own step, never one not
	// read yet (0) or read steps ago.
	if done%c.LogInterval == 0 || done == c.steps || eval {
		l.logged, l.loggedAt = loss, done
	}
	if !eval {
		return nil
	}
	if err := l.read(ctx); err != nil {
		return err
	}
	var err error
	if l.res.ValLoss, err = l.t.valLoss(ctx, done); err != nil {
		return err
	}
	l.res.ValLosses = append(l.res.ValLosses, [2]float64{float64(done), l.res.ValLoss})
	l.curves.AddValLoss(done, l.res.ValLoss)
	if l.t.w.Rank == 0 {
		l.progress.Note(fmt.Sprintf("step %d: train loss %.4f, val loss %.4f, lr %.3g", done, l.res.TrainLoss, l.res.ValLoss, l.t.opt.LR()))
	}
	if c.Checkpoint == "" {
		return nil
	}
	ck := loop.State()
	ck.Step = done
	return checkpoint.Save(ctx, c.Checkpoint, ck)
}

// finish samples text, digests the weights and prints rank 0's summary.
func (t *trainer) finish(ctx context.Context, out io.Writer, res *result, curves *report.Curves) error {
	c := t.c
	res.Compilations = xla.GetMetrics().Compilations
	res.GradientSyncs = t.model.GradientSyncs()
	var err error
	if c.sample > 0 {
		if res.Sample, err = generate(ctx, t, c.sample); err != nil {
			return err
		}
	}
	weights, err := nn.WeightsDigest(ctx, t.net)
	if err != nil || t.w.Rank != 0 {
		return err
	}
	if st := t.model.DeterministicStats(); st.Steps > 0 {
		fmt.Fprintf(out, "deterministic exchange: %d bytes sent a step by this process\n", st.BytesSent/int64(st.Steps))
	}
	fmt.Fprintf(out, "weights sha256 %s\n", weights)
	fmt.Fprintf(out, "done: %d steps, train loss %.4f, val loss %.4f, %v training, %.0f tokens/s, %d gradient all-reduces, programs: %d compiled\n",
		res.Steps, res.TrainLoss, res.ValLoss, res.Trained.Round(time.Millisecond), res.TokensPerSec, res.GradientSyncs, res.Compilations)
	if res.Sample != "" {
		fmt.Fprintf(out, "sample (%s characters, temperature %s):\n%s\n", strconv.Itoa(c.sample), strconv.FormatFloat(sampleTemperature, 'g', -1, 64), res.Sample)
	}
	return c.Finish(out, curves)
}
