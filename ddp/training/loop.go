package training

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"os"
	"strconv"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/ddp/checkpoint"
	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/internal/quote"
	"github.com/xladdp/xladdp/internal/workerenv"
	"github.com/xladdp/xladdp/xla/optim"
)

// The metadata a loop's checkpoints carry beside optim.Checkpoint's epoch
// and step: where in the epoch's global sample order the run stood, and
// the replica count and global batch that wrote it.
const (
	metaPosition = "training.epoch_position"
	metaReplicas = "training.replicas"
	metaGlobal   = "training.global_batch"
	// metaLoss says why a step was committed when a peer's loss did it
	// (End), for the resumed run to say.
	metaLoss = "training.committed_on"
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
	// GlobalBatch is a step's samples over the job.
	GlobalBatch() int
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
	order    Order
	global   int
	ck       *checkpoint.Checkpointer
	state    optim.Checkpoint
	at       Position
	resumed  string
	replicas int
	// wasReplicas and wasGlobal are the resumed checkpoint's layout.
	wasReplicas, wasGlobal int
	err                    error // the last step's commit's
	// rank names this replica when it commits after a peer's loss
	// (End); process and flightDir its process's note to ddprun (one a
	// worker, whatever its local replicas).
	rank, process int
	flightDir     string
	// next is where the step Steps yielded last stands once done: End
	// commits it when the Feed trained that step before the program
	// stopped.
	next Position
}

// Open starts replica w's loop over order (a Feed), restoring the latest
// checkpoint of w.Checkpoints into state if there is one, and order's
// position with it. state names what a checkpoint holds (model,
// optimizer, random state, metadata). Close the loop when training ends.
func Open(ctx context.Context, w ddp.Worker, order Order, state optim.Checkpoint) (*Loop, error) {
	l := &Loop{order: order, global: order.GlobalBatch(), state: state, replicas: w.WorldSize, rank: w.Rank,
		process: dist.Current().Rank(), flightDir: os.Getenv(workerenv.FlightDir)}
	if w.Checkpoints.Dir == "" {
		return l, nil
	}
	var err error
	if l.ck, err = checkpoint.New(w.Checkpoints); err != nil {
		return nil, fmt.Errorf("--checkpoint-dir: %w", err)
	}
	shared, err := l.ck.SeenByEveryRank(ctx, w.Device)
	if err != nil {
		return nil, errors.Join(err, l.ck.Close())
	}
	if !shared && w.Rank == 0 {
		fmt.Fprintf(os.Stderr, "training: note: --checkpoint-dir %s is not one directory every rank sees (each node its own?): "+
			"a resume needs the same files on every rank, and a lost node's survivors commit where the others cannot read; "+
			"give every node one shared directory\n", w.Checkpoints.Dir)
	}
	if err := l.restore(ctx, w.Checkpoints.Dir); err != nil {
		return nil, errors.Join(err, l.ck.Close())
	}
	if b, ok := state.Optimizer.(buddyKeeper); ok {
		// So that a lost peer's shards can be committed (End).
		if err := b.KeepBuddyCopies(ctx); err != nil {
			return nil, errors.Join(err, l.ck.Close())
		}
	}
	return l, nil
}

// buddyKeeper is a sharded optimizer that can keep a copy of each shard
// on another node (ddp/zero's).
type buddyKeeper interface {
	KeepBuddyCopies(ctx context.Context) error
}

// restore reads the latest checkpoint of dir, if any, and where it stood.
func (l *Loop) restore(ctx context.Context, dir string) error {
	resumed, err := l.ck.Restore(ctx, &l.state)
	if err != nil || !resumed {
		return err
	}
	at, ok, err := l.position()
	if err == nil && !ok {
		err = fmt.Errorf("the latest checkpoint's %s is \"\", not a count", metaPosition)
	}
	if err != nil {
		return fmt.Errorf("--checkpoint-dir %s: %w: a checkpoint no training loop wrote; move it away to start afresh", dir, err)
	}
	if from := l.ck.HealedFrom(); from != "" {
		dir = from
	}
	return l.resumeAt(dir, at)
}

// position is where the restored checkpoint stood, and whether it says
// (a loop's checkpoints do; an export does not).
func (l *Loop) position() (Position, bool, error) {
	meta := l.state.Metadata
	if _, ok := meta[metaPosition]; !ok {
		return Position{}, false, nil
	}
	samples, err1 := metaCount(meta, metaPosition, 0)
	replicas, err2 := metaCount(meta, metaReplicas, 1)
	global, err3 := metaCount(meta, metaGlobal, 1)
	if err := cmp.Or(err1, err2, err3); err != nil {
		return Position{}, false, err
	}
	l.wasReplicas, l.wasGlobal = replicas, global
	return Position{Epoch: l.state.Epoch, Samples: samples, Step: l.state.Step}, true, nil
}

// resumeAt moves the loop and its order to at, from the checkpoint from.
func (l *Loop) resumeAt(from string, at Position) error {
	l.at = at
	if err := l.order.ResumeAt(at.Epoch, at.Samples); err != nil {
		return err
	}
	// A copy (the local replicas may share the map Restore read), without
	// the position: commit writes it afresh, and an export never holds a
	// stale one.
	l.state.Metadata = maps.Clone(l.state.Metadata)
	why := l.state.Metadata[metaLoss]
	for _, name := range []string{metaPosition, metaReplicas, metaGlobal, metaLoss} {
		delete(l.state.Metadata, name)
	}
	l.resumed = fmt.Sprintf("resumed from %s at step %d (epoch %d, sample %d of its order)", from, at.Step, at.Epoch+1, at.Samples)
	if why != "" {
		l.resumed += fmt.Sprintf(", the last step completed when %s: no completed step is redone", quote.Text([]byte(why)))
	}
	if l.wasReplicas != l.replicas || l.wasGlobal != l.global {
		l.resumed += fmt.Sprintf("; written by %d replicas (a global batch of %d), now %d (%d): the epoch goes on from the same sample",
			l.wasReplicas, l.wasGlobal, l.replicas, l.global)
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

// LoadFile starts the loop from a checkpoint file instead (checkpoint.Load):
// where it stood when it is a loop's own (a step-N file of a checkpoint
// directory), else at its epoch's start with the order left as it is (an
// export such as the examples' --checkpoint; a program whose steps cross
// epochs moves its order itself).
func (l *Loop) LoadFile(ctx context.Context, path string) error {
	if l.resumed != "" {
		return fmt.Errorf("training: loading %s: the loop already resumed from its checkpoint directory", path)
	}
	if err := checkpoint.Load(ctx, path, &l.state); err != nil {
		return err
	}
	at, ok, err := l.position()
	switch {
	case err != nil:
		return fmt.Errorf("training: %s: %w", path, err)
	case ok:
		return l.resumeAt(path, at)
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

// Epochs yields the epochs left of n. When the last one ends, the loop's
// last step is committed whatever --checkpoint-every says, so the same
// command run again finds nothing left to train; an error there is
// Close's.
func (l *Loop) Epochs(ctx context.Context, n int) iter.Seq[int] {
	return func(yield func(int) bool) {
		for epoch := l.at.Epoch; epoch < n; epoch++ {
			if !yield(epoch) {
				return
			}
		}
		l.err = l.commit(ctx, l.at, true)
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
			l.next = Position{Epoch: epoch, Samples: epochStart + (index+1)*l.global, Step: l.at.Step + 1}
			if !yield(st, nil) {
				return
			}
			if err := l.Commit(ctx, l.next); err != nil {
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
	return l.commit(ctx, at, false)
}

// commit is Commit; last writes the checkpoint whatever Every says.
func (l *Loop) commit(ctx context.Context, at Position, last bool) error {
	l.at = at
	if l.ck == nil {
		return nil
	}
	state := l.stateAt(l.at)
	if last {
		return l.ck.Last(ctx, state)
	}
	return l.ck.Step(ctx, state)
}

// stateAt is the checkpoint of the loop standing at at.
func (l *Loop) stateAt(at Position) optim.Checkpoint {
	state := l.state
	state.Epoch, state.Step = at.Epoch, at.Step
	meta := maps.Clone(state.Metadata)
	if meta == nil {
		meta = map[string]string{}
	}
	meta[metaPosition] = strconv.Itoa(at.Samples)
	meta[metaReplicas] = strconv.Itoa(l.replicas)
	meta[metaGlobal] = strconv.Itoa(l.global)
	state.Metadata = meta
	return state
}

// Close waits for the checkpoint being written and returns its error,
// or the last step's commit's.
func (l *Loop) Close() error {
	if l.ck == nil {
		return l.err
	}
	return errors.Join(l.err, l.ck.Close())
}
