package training

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"strconv"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/ddp/checkpoint"
	"github.com/xladdp/xladdp/xla/optim"
)

// The metadata a loop's checkpoints carry beside optim.Checkpoint's epoch
// and step: where in the epoch's global sample order the run stood, and
// the replica count and per-replica batch that wrote it.
const (
	metaPosition   = "training.epoch_position"
	metaReplicas   = "training.replicas"
	metaPerReplica = "training.per_replica_batch"
)

// Position is where a run stands: the epoch, the samples of the epoch's
// global order used so far, and the steps done since the start.
type Position struct {
	Epoch, Samples, Step int
}

// Order is a data order a Loop resumes and records (a Feed is one): each
// epoch a global order of samples, used a step's worth at a time.
type Order interface {
	// ResumeAt says that the first samples of epoch's order were used
	// before.
	ResumeAt(epoch, samples int) error
	// StepSamples is a step's samples over the job and on one replica
	// (a deterministic step's micro-shard): what a checkpoint records of
	// the layout that wrote it.
	StepSamples() (global, perReplica int)
}

// Loop is a replica's training run over an Order's epochs, kept in the
// job's checkpoint directory (Worker.Checkpoints: --checkpoint-dir,
// --checkpoint-every): Open resumes where the last run stood (its epoch,
// the samples of the epoch's order it used, its steps) at any world size;
// Epochs and Steps go on from there; after each step a checkpoint is
// committed when one is due, and at once when the job is asked to stop
// (SIGTERM), after which Steps yields checkpoint.ErrPreempted. Without a
// checkpoint directory it only counts.
type Loop struct {
	order                Order
	global               int
	ck                   *checkpoint.Checkpointer
	state                optim.Checkpoint
	at                   Position
	resumed              string
	replicas, perReplica int
}

// Open starts replica w's loop over order (a Feed), restoring the latest
// checkpoint of w.Checkpoints into state if there is one, and order's
// position with it. state names what a checkpoint holds (model,
// optimizer, random state, metadata). Close the loop when training ends.
func Open(ctx context.Context, w ddp.Worker, order Order, state optim.Checkpoint) (*Loop, error) {
	global, perReplica := order.StepSamples()
	l := &Loop{order: order, global: global, state: state, replicas: w.WorldSize, perReplica: perReplica}
	if w.Checkpoints.Dir == "" {
		return l, nil
	}
	var err error
	if l.ck, err = checkpoint.New(w.Checkpoints); err != nil {
		return nil, fmt.Errorf("--checkpoint-dir: %w", err)
	}
	if err := l.restore(ctx, w.Checkpoints.Dir); err != nil {
		return nil, errors.Join(err, l.ck.Close())
	}
	return l, nil
}

// restore reads the latest checkpoint of dir, if any, and where it stood.
func (l *Loop) restore(ctx context.Context, dir string) error {
	resumed, err := l.ck.Restore(ctx, &l.state)
	if err != nil || !resumed {
		return err
	}
	meta := l.state.Metadata
	samples, err1 := metaCount(meta, metaPosition, 0)
	wasReplicas, err2 := metaCount(meta, metaReplicas, 1)
	wasPerReplica, err3 := metaCount(meta, metaPerReplica, 1)
	if err := cmp.Or(err1, err2, err3); err != nil {
		return fmt.Errorf("--checkpoint-dir %s: %w: a checkpoint no training loop wrote; move it away to start afresh", dir, err)
	}
	l.at = Position{Epoch: l.state.Epoch, Samples: samples, Step: l.state.Step}
	if err := l.order.ResumeAt(l.at.Epoch, l.at.Samples); err != nil {
		return err
	}
	// A copy (the local replicas may share the map Restore read), without
	// the position: commit writes it afresh, and an export never holds a
	// stale one.
	l.state.Metadata = maps.Clone(meta)
	for _, name := range []string{metaPosition, metaReplicas, metaPerReplica} {
		delete(l.state.Metadata, name)
	}
	l.resumed = fmt.Sprintf("resumed from %s at step %d (epoch %d, sample %d of its order)", dir, l.at.Step, l.at.Epoch+1, l.at.Samples)
	if wasReplicas != l.replicas || wasPerReplica != l.perReplica {
		l.resumed += fmt.Sprintf("; written by %d replicas of %d samples a step, now %d of %d: the epoch goes on from the same sample",
			wasReplicas, wasPerReplica, l.replicas, l.perReplica)
	}
	return nil
}

// metaCount reads a checkpoint's count name, least at the smallest.
func metaCount(meta map[string]string, name string, least int) (int, error) {
	n, err := strconv.Atoi(meta[name])
	if err != nil || n < least {
		return 0, fmt.Errorf("the latest checkpoint's %s is %q, not a count", name, meta[name])
	}
	return n, nil
}

// LoadFile starts the loop from a checkpoint file instead (checkpoint.Load:
// an export such as the examples' --checkpoint), at its epoch's start:
// the order is left at its start (a program whose steps cross epochs
// moves it itself).
func (l *Loop) LoadFile(ctx context.Context, path string) error {
	if l.resumed != "" {
		return fmt.Errorf("training: loading %s: the loop already resumed from its checkpoint directory", path)
	}
	if err := checkpoint.Load(ctx, path, &l.state); err != nil {
		return err
	}
	l.at = Position{Epoch: l.state.Epoch, Step: l.state.Step}
	l.resumed = fmt.Sprintf("resumed from %s at epoch %d", path, l.at.Epoch+1)
	return nil
}

// Resumed says where the loop resumed ("" for a fresh start), for rank 0
// to print.
func (l *Loop) Resumed() string { return l.resumed }

// Position is where the run stands now.
func (l *Loop) Position() Position { return l.at }

// State is the checkpoint's contents as restored (its metadata the
// program's own).
func (l *Loop) State() optim.Checkpoint { return l.state }

// Epochs yields the epochs left of n.
func (l *Loop) Epochs(n int) iter.Seq[int] {
	return func(yield func(int) bool) {
		for epoch := l.at.Epoch; epoch < n; epoch++ {
			if !yield(epoch) {
				return
			}
		}
	}
}

// Steps is an epoch's steps (a Feed's Steps of the loader's epoch: a last
// partial batch is a step where the loader yields one), at most maxSteps
// of them (0: the whole epoch), each Step's Index its place in the epoch
// counting those run before a resume. After each step the loop commits
// its position (Commit); an error there (checkpoint.ErrPreempted on
// SIGTERM) is yielded next.
func (l *Loop) Steps(ctx context.Context, epoch int, steps iter.Seq2[Step, error], maxSteps int) iter.Seq2[Step, error] {
	return func(yield func(Step, error) bool) {
		epochStart := l.usedOf(epoch)
		before := epochStart / l.global
		for st, err := range steps {
			if err != nil {
				yield(Step{}, err)
				return
			}
			index := st.Index
			if st.Index = before + index; maxSteps > 0 && st.Index >= maxSteps {
				return
			}
			if !yield(st, nil) {
				return
			}
			at := Position{Epoch: epoch, Samples: epochStart + (index+1)*l.global, Step: l.at.Step + 1}
			if err := l.Commit(ctx, at); err != nil {
				yield(Step{}, err)
				return
			}
		}
	}
}

// usedOf is how many samples of epoch's order were used before: the
// position's for the epoch the run stood in, none of a later one.
func (l *Loop) usedOf(epoch int) int {
	if epoch != l.at.Epoch {
		return 0
	}
	return l.at.Samples
}

// Commit moves the loop to at, where the run stands after a step, and
// commits a checkpoint there when one is due or the job was asked to stop
// (then it returns checkpoint.ErrPreempted). Every replica calls it after
// every step; Steps does.
func (l *Loop) Commit(ctx context.Context, at Position) error {
	l.at = at
	if l.ck == nil {
		return nil
	}
	state := l.state
	state.Epoch, state.Step = l.at.Epoch, l.at.Step
	meta := maps.Clone(state.Metadata)
	if meta == nil {
		meta = map[string]string{}
	}
	meta[metaPosition] = strconv.Itoa(l.at.Samples)
	meta[metaReplicas] = strconv.Itoa(l.replicas)
	meta[metaPerReplica] = strconv.Itoa(l.perReplica)
	state.Metadata = meta
	return l.ck.Step(ctx, state)
}

// Close waits for the checkpoint being written and returns its error.
func (l *Loop) Close() error {
	if l.ck == nil {
		return nil
	}
	return l.ck.Close()
}
