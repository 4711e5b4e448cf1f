package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/ddp/internal/exchange"
	"github.com/xladdp/xladdp/xla/optim"
	"github.com/xladdp/xladdp/xla/safetensors"
)

// ErrShardsLost is Salvage's refusal for an optimizer sharded over the
// replicas (ddp/zero) whose survivors cannot keep the lost rank's shard
// (no buddy copies were kept, or they are not of the loop's step; the
// error says which), so the job resumes from its last periodic
// checkpoint.
var ErrShardsLost = errors.New("checkpoint: the optimizer is sharded over the replicas (ZeRO) and the survivors cannot keep the lost rank's shard: " +
	"the job resumes from its last periodic checkpoint (--checkpoint-every)")

// shardSalvager is a sharded optimizer that keeps buddy copies of its
// shards (ddp/zero's): after a peer's loss every survivor writes what it
// holds of the last steps into their salvage directories, and a resume
// assembles the newest complete one.
type shardSalvager interface {
	SalvageShards(ctx context.Context, dirOf func(step int) string, c optim.Checkpoint) error
	AssembleSalvaged(from, to string, step int) error
}

// salvageSuffix marks a step's salvage directory beside its checkpoint.
const salvageSuffix = ".salvage"

// Salvage commits c, the last step this process's replicas completed,
// when the job cannot go on together because a peer was lost inside a
// collective. It is Step's commit without any collective (the lost rank
// never comes): every surviving process writes the step it holds, as its
// own file, atomically, and the newest committed step in the directory is
// the one the job resumes from. A survivor that completed one step more
// than another (the lost peer's last data reached it only) holds the
// step the job completed; replicas that both completed a step hold the
// same bits, so two survivors writing it race harmlessly. It returns the
// path of the step committed, or of a later one already there (then
// nothing is written). Every local replica calls it at the same point.
//
// For a sharded optimizer that kept buddy copies, each survivor writes
// the pieces it holds of the steps it kept, and c's model; the next
// Restore assembles the newest whole step. Without buddy copies it
// returns ErrShardsLost.
func (ck *Checkpointer) Salvage(ctx context.Context, c optim.Checkpoint) (string, error) {
	c.Metadata = ck.opts.withSettings(c.Metadata)
	if kindOf(c.Optimizer) == sharded {
		return ck.salvageShards(ctx, c)
	}
	dev, err := checkpointDevice(c.Model)
	if err != nil {
		return "", err
	}
	if err := dev.MarkStep(ctx); err != nil {
		return "", fmt.Errorf("checkpoint: the state of step %d: %w", c.Step, err)
	}
	g := dist.Current()
	return exchange.HostOnce(ctx, dev, exchange.Timeout(g), fmt.Sprintf("committing step %d", c.Step), func() (string, error) {
		if err := ck.finishWrite(); err != nil {
			// The periodic checkpoint did not land; this one still can.
			fmt.Fprintf(os.Stderr, "checkpoint: writing the previous checkpoint: %v\n", err)
		}
		if steps := ck.saved(plain); len(steps) > 0 && steps[len(steps)-1] >= c.Step {
			return ck.path(steps[len(steps)-1], plain), nil
		}
		_, local := dev.Replica()
		snap, err := salvageSnapshot(ctx, c, g.WorldSize()*local)
		if err != nil {
			return "", err
		}
		path := ck.path(c.Step, plain)
		if err := snap.WriteFile(path, &ck.streamer); err != nil {
			return "", err
		}
		ck.prune(plain)
		return path, safetensors.SyncDir(ck.opts.Dir)
	})
}

// combinedRNGs is a model that keeps every replica's random state as of
// the last step combined across processes (ddp's wrapper on the host
// path).
type combinedRNGs interface{ CombinedRNGStates() [][]byte }

// salvageSnapshot is c's snapshot in a job of replicas replicas. Their
// random states are the ones the model kept with the step (every
// replica's, the lost one's too: a resume at the same world size draws as
// the uninterrupted run), else, where it keeps none, one row of them,
// this replica's, which a resume at one replica takes and one at several
// leaves (each keeps its own seeding, as at another replica count).
func salvageSnapshot(ctx context.Context, c optim.Checkpoint, replicas int) (optim.Snapshot, error) {
	snap, err := optim.TakeSnapshot(ctx, c)
	if err != nil {
		return snap, fmt.Errorf("checkpoint: checkpoint of step %d: %w", c.Step, err)
	}
	if c.RNG == nil || replicas == 1 {
		return snap, nil
	}
	var states [][]byte
	if m, ok := c.Model.(combinedRNGs); ok {
		states = m.CombinedRNGStates()
	}
	if len(states) != replicas {
		mine, err := c.RNG.RNGState().Bytes(ctx)
		if err != nil {
			return snap, fmt.Errorf("checkpoint: reading the random state: %w", err)
		}
		states = [][]byte{mine}
	}
	snap.Tensors = append(slices.Clone(snap.Tensors), replicaRNGSource(c.RNG, states))
	return snap, nil
}

// salvageShards is Salvage for a sharded optimizer.
func (ck *Checkpointer) salvageShards(ctx context.Context, c optim.Checkpoint) (string, error) {
	if steps := ck.saved(sharded); len(steps) > 0 && steps[len(steps)-1] >= c.Step {
		return ck.path(steps[len(steps)-1], sharded), nil // the step it resumed from, or a periodic checkpoint's
	}
	s, ok := c.Optimizer.(shardSalvager)
	if !ok {
		return "", ErrShardsLost
	}
	if err := s.SalvageShards(ctx, ck.salvageDir, c); err != nil {
		return "", fmt.Errorf("%w (%w)", ErrShardsLost, err)
	}
	return fmt.Sprintf("the shards it holds of step %d (its own and its ward's) in %s, which the resumed job assembles", c.Step, ck.salvageDir(c.Step)), nil
}

// salvageDir is step's salvage directory.
func (ck *Checkpointer) salvageDir(step int) string { return ck.path(step, sharded) + salvageSuffix }
