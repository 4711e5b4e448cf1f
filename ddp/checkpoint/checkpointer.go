package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/ddp/internal/exchange"
	"github.com/xladdp/xladdp/ddp/internal/termination"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/optim"
	"github.com/xladdp/xladdp/xla/safetensors"
)

// Options configure New.
type Options struct {
	// Dir holds the checkpoints, shared by every rank (or copied to each)
	// to resume from: step-<N>.safetensors files, or for an optimizer
	// sharded over the replicas (ddp/zero) step-<N> directories, written
	// on the step by every replica and renamed into place once committed.
	Dir string
	// Every is how many steps apart checkpoints are written (0: only when
	// preempted).
	Every int
	// Keep is how many checkpoints stay (default 2); older ones are
	// removed once a newer one is committed.
	Keep int
	// Settings are the program's values that change what training
	// computes, by flag name ("lr": "0.1"; Record fills them from the
	// flags): every checkpoint records them, and resuming from one that
	// recorded other values is refused, naming each, unless Override
	// names the flag; then the change is logged.
	Settings map[string]string
	// Override names the settings a resume may change
	// (--resume-override).
	Override []string
}

// Checkpointer saves a training job so that it can stop at any time and
// resume bit for bit: every Every steps, and at once when SIGTERM reaches
// any rank, the ranks agree, commit a checkpoint of the step just done,
// and Step returns ErrPreempted. Give the optim.Checkpoint everything a
// resume needs: model, optimizer, Step and Epoch (with the sampler's
// epoch and position derived from them) and RNG for dropout.
type Checkpointer struct {
	opts   Options
	termed atomic.Bool
	// preempted: Step returned ErrPreempted, the checkpoint is committed.
	preempted atomic.Bool
	signals   chan os.Signal
	wg        sync.WaitGroup
	closed    sync.Once
	// writing is the periodic checkpoint being written off the step (rank
	// 0), and written its outcome; streamer's buffer carries each tensor
	// from the device to the file.
	writing  sync.WaitGroup
	written  error
	streamer safetensors.Streamer
	// release gives SIGTERM back to the process group's handling;
	// unclaim gives the directory up (owner.go).
	release, unclaim func()
	// unclaimOnce gives the directory up after the last write.
	unclaimOnce sync.Once
	// join is the offer to hold a step for a joining node (hold.go);
	// healedFrom says which live peer the last Restore healed from.
	join       joinOffer
	healedFrom string
}

// New returns a checkpointer writing into o.Dir; from now on
// SIGTERM asks it to checkpoint and stop instead of ending the process.
// The directory is this job's until Close: another job running on it is
// refused, naming it; one that died is taken over. Close it when
// training ends.
func New(o Options) (*Checkpointer, error) {
	if o.Dir == "" {
		return nil, errors.New("checkpoint: a checkpointer needs a directory (Options.Dir; --checkpoint-dir under ddp.Main)")
	}
	if o.Every < 0 || o.Keep < 0 {
		return nil, fmt.Errorf("checkpoint: Every %d and Keep %d must not be negative", o.Every, o.Keep)
	}
	if o.Keep == 0 {
		o.Keep = 2
	}
	if err := o.checkOverride(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("checkpoint: making the checkpoint directory: %w", err)
	}
	// A directory that takes no file is found now, not at the first
	// checkpoint or at the preemption notice, whose save would fail.
	probe, err := os.CreateTemp(o.Dir, ".xladdp-write-check-*")
	if err != nil {
		return nil, fmt.Errorf("checkpoint: the checkpoint directory %s takes no file: %w", o.Dir, err)
	}
	if err := errors.Join(probe.Close(), os.Remove(probe.Name())); err != nil {
		return nil, fmt.Errorf("checkpoint: the checkpoint directory %s: %w", o.Dir, err)
	}
	unclaim, err := claimDir(o.Dir)
	if err != nil {
		return nil, err
	}
	ck := &Checkpointer{opts: o, signals: make(chan os.Signal, 1), release: termination.Hold(), unclaim: unclaim, join: offerToHold()}
	signal.Notify(ck.signals, syscall.SIGTERM, os.Interrupt) // Ctrl-C is a notice too (termination.Context says so)
	ck.wg.Add(1)
	go func() {
		defer ck.wg.Done()
		for range ck.signals {
			ck.termed.Store(true)
		}
	}()
	return ck, nil
}

// Close waits for the checkpoint being written and stops listening for
// SIGTERM (a second Close does nothing); it returns the write's error.
// After a preemption SIGTERM is ignored from then on: the notice reaches
// the ranks at different times, and one arriving after the commit must
// not kill a rank on its way to exiting ExitPreempted.
func (ck *Checkpointer) Close() error {
	ck.closed.Do(func() {
		if ck.preempted.Load() {
			signal.Ignore(syscall.SIGTERM)
		}
		signal.Stop(ck.signals)
		close(ck.signals)
		ck.wg.Wait()
		ck.release()
		ck.join.withdraw()
	})
	err := ck.finishWrite()
	ck.unclaimOnce.Do(ck.unclaim)
	ck.streamer.Release()
	return err
}

// finishWrite waits for the periodic checkpoint being written and
// returns (once) how its write went.
func (ck *Checkpointer) finishWrite() error {
	ck.writing.Wait()
	err := ck.written
	ck.written = nil
	return err
}

// path is step's checkpoint of the kind given: a file, or for a sharded
// optimizer a directory.
func (ck *Checkpointer) path(step int, k kind) string {
	return filepath.Join(ck.opts.Dir, k.name(step))
}

// saved lists the committed checkpoints' steps of kind k, oldest first:
// files, or for the sharded kind directories, named as k names them.
func (ck *Checkpointer) saved(k kind) []int {
	names, _ := filepath.Glob(filepath.Join(ck.opts.Dir, "step-*"))
	var steps []int
	for _, n := range names {
		var step int
		if _, err := fmt.Sscanf(filepath.Base(n), "step-%d", &step); err != nil || step < 0 || n != ck.path(step, k) {
			continue
		}
		if info, err := os.Stat(n); err == nil && info.IsDir() == bool(k) {
			steps = append(steps, step)
		}
	}
	slices.Sort(steps)
	return steps
}

// Restore loads the latest checkpoint into c on every replica (as Load
// does) and reports whether there was one: the step a live process of the
// job holds in memory for a joining node first (heal.go), else the
// directory's newest; without one, c is left as it
// is (a fresh start). A directory whose latest checkpoint is of the other
// kind (single-file for a sharded optimizer, or the reverse) is refused,
// never taken for an empty one.
func (ck *Checkpointer) Restore(ctx context.Context, c *optim.Checkpoint) (bool, error) {
	k := kindOf(c.Optimizer)
	if k == plain {
		if healed, err := ck.heal(ctx, c); healed || err != nil {
			return healed, err
		}
	}
	if k == sharded {
		if err := ck.assembleSalvaged(ctx, c); err != nil {
			return false, err
		}
	}
	if err := ck.newestUsable(); err != nil {
		return false, err
	}
	mine, other := ck.saved(k), ck.saved(!k)
	if len(other) > 0 && (len(mine) == 0 || other[len(other)-1] > mine[len(mine)-1]) {
		return false, k.refuse(ck.path(other[len(other)-1], !k))
	}
	if len(mine) == 0 {
		return false, nil
	}
	path := ck.path(mine[len(mine)-1], k)
	if err := Load(ctx, path, c); err != nil {
		return true, err
	}
	return true, ck.opts.checkSettings(path, c.Metadata)
}

// Step is called by every replica after each training step, with c.Step
// the number of steps done. It writes a checkpoint when one is due or the
// job was asked to stop, and then returns ErrPreempted; every replica
// gets the same answer.
func (ck *Checkpointer) Step(ctx context.Context, c optim.Checkpoint) error {
	return ck.step(ctx, c, false)
}

// Last is Step for a loop's last step: its checkpoint is written whatever
// Every says, so the same command run again finds nothing left to train.
func (ck *Checkpointer) Last(ctx context.Context, c optim.Checkpoint) error {
	return ck.step(ctx, c, true)
}

// step is Step, with a checkpoint due whatever Every says when commit.
func (ck *Checkpointer) step(ctx context.Context, c optim.Checkpoint, commit bool) error {
	c.Metadata = ck.opts.withSettings(c.Metadata)
	dev, err := checkpointDevice(c.Model)
	if err != nil {
		return err
	}
	g := dist.Current()
	stop, err := ck.agreeOnStop(ctx, dev, g)
	if err != nil {
		return err
	}
	due := commit || ck.opts.Every > 0 && c.Step%ck.opts.Every == 0
	if stop == forJoin && commit {
		// The job's last step: it ends, and a joining node is told so.
		stop = goOn
	}
	k := kindOf(c.Optimizer)
	switch {
	case k == sharded && (stop != goOn || due):
		err = ck.saveSharded(ctx, dev, g, c)
	case stop == forPreemption:
		// Committed on every rank before anyone exits.
		err = ck.saveOnTheStep(ctx, c)
	case stop == forJoin:
		err = ck.hold(ctx, dev, g, c)
	case due:
		return ck.saveOffTheStep(ctx, dev, g, c)
	}
	switch {
	case err != nil:
		return err
	case stop == forPreemption:
		ck.preempted.Store(true)
		return fmt.Errorf("checkpoint: step %d is committed in %s; the same command resumes from it: %w", c.Step, ck.opts.Dir, ErrPreempted)
	case stop == forJoin && k == sharded:
		where := "in " + ck.path(c.Step, sharded)
		return errors.Join(heldForJoin{step: c.Step, where: where}, noteHeld(g, fmt.Sprintf("step %d %s", c.Step, where)))
	case stop == forJoin:
		return heldForJoin{step: c.Step, where: "in every process's memory"}
	}
	return nil
}

// agreeOnStop tells every replica whether SIGTERM reached any rank, or
// else whether any rank's agent asked for a step to hold for a joining
// node: one all-reduce of a flag a step.
func (ck *Checkpointer) agreeOnStop(ctx context.Context, dev *xla.Device, g *dist.ProcessGroup) (stopFor, error) {
	return exchange.HostOnce(ctx, dev, exchange.Timeout(g), "agreeing on preemption", func() (stopFor, error) {
		flag := []int32{int32(goOn)}
		switch {
		case ck.termed.Load():
			flag[0] = int32(forPreemption)
		case ck.join.requested():
			flag[0] = int32(forJoin)
		}
		if g.WorldSize() > 1 {
			if err := g.AllReduce(ctx, dist.Int32s(flag), dist.Max); err != nil {
				return goOn, fmt.Errorf("checkpoint: agreeing on preemption: %w", err)
			}
		}
		return stopFor(flag[0]), nil
	})
}

// saveOnTheStep writes c's file on rank 0 before Step returns anywhere.
func (ck *Checkpointer) saveOnTheStep(ctx context.Context, c optim.Checkpoint) error {
	path := ck.path(c.Step, plain)
	return saveOnRankZero(ctx, path, c, func(take func() (optim.Snapshot, error)) error {
		if err := ck.finishWrite(); err != nil {
			return fmt.Errorf("checkpoint: writing the previous checkpoint: %w", err)
		}
		snap, err := take()
		if err != nil {
			return err
		}
		if err := snap.WriteFile(path, &ck.streamer); err != nil {
			return err
		}
		ck.prune(plain)
		return nil
	})
}

// saveOffTheStep takes a snapshot of c on rank 0 (no copy: later steps
// stop updating its buffers in place) and writes the file while training
// goes on; the next save or Close waits for it and reports its error.
func (ck *Checkpointer) saveOffTheStep(ctx context.Context, dev *xla.Device, g *dist.ProcessGroup, c optim.Checkpoint) error {
	return checkpointOnce(ctx, dev, g, fmt.Sprintf("taking the checkpoint of step %d", c.Step), c, func(take func() (optim.Snapshot, error)) error {
		if g.Rank() != 0 {
			return nil
		}
		if err := ck.finishWrite(); err != nil {
			return fmt.Errorf("checkpoint: writing the previous checkpoint: %w", err)
		}
		snap, err := take()
		if err != nil {
			return err
		}
		path := ck.path(c.Step, plain)
		ck.writing.Add(1)
		// The engine's Close (Spawn's and Run's return) waits for the
		// write: Step accepted this checkpoint.
		keep := dev.Engine().KeepOpen()
		go func() {
			defer ck.writing.Done()
			defer keep()
			yieldToTraining()
			beforeBackgroundWrite()
			if ck.written = snap.WriteFile(path, &ck.streamer); ck.written == nil {
				ck.prune(plain)
			}
		}()
		return nil
	})
}

// saveSharded writes c's sharded checkpoint (every replica its shard)
// into a partial directory, which rank 0 renames into place once every
// replica wrote: a checkpoint killed halfway is never restored.
func (ck *Checkpointer) saveSharded(ctx context.Context, dev *xla.Device, g *dist.ProcessGroup, c optim.Checkpoint) error {
	final := ck.path(c.Step, sharded)
	partial := final + ".partial"
	if err := Save(ctx, partial, c); err != nil {
		return err
	}
	_, err := exchange.HostOnce(ctx, dev, exchange.Timeout(g), "committing "+final, func() (struct{}, error) {
		var err error
		if g.Rank() == 0 {
			_ = os.RemoveAll(final) // one an earlier attempt of the job committed
			if err = os.Rename(partial, final); err == nil {
				err = safetensors.SyncDir(ck.opts.Dir)
				ck.prune(sharded)
			}
		}
		return struct{}{}, exchange.AgreeOnRankZero(ctx, g, err, "committing "+final)
	})
	return err
}

// beforeBackgroundWrite runs as a background write starts; the tests
// slow the writer down with it.
var beforeBackgroundWrite = func() {}

// prune removes the checkpoints of kind k beyond the Keep newest (rank 0,
// after a commit).
func (ck *Checkpointer) prune(k kind) {
	steps := ck.saved(k)
	for _, s := range steps[:max(0, len(steps)-ck.opts.Keep)] {
		_ = os.RemoveAll(ck.path(s, k))
	}
}
