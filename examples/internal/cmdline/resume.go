package cmdline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"strconv"

	"github.com/xladdp/xladdp/ddp/checkpoint"
	"github.com/xladdp/xladdp/xla/optim"
)

// The metadata a training checkpoint carries beside optim.Checkpoint's
// epoch and step: where in the epoch's global sample order the run
// stood, and the replica count and per-replica batch that wrote it.
const (
	metaPosition   = "examples.epoch_position"
	metaReplicas   = "examples.replicas"
	metaPerReplica = "examples.per_replica_batch"
)

// Preemption is ddp.Flags' --checkpoint-dir and --checkpoint-every
// (ddp.Options.Checkpoints): checkpoints a job resumes from when the same
// command runs again, written every N steps and at once on SIGTERM (then
// the job exits 75).
type Preemption checkpoint.Options

// Position is where a run stands: the epoch, the samples of the epoch's
// global order used so far, and the steps done since the start.
type Position struct {
	Epoch, Samples, Step int
}

// Used is how many samples of epoch's global order were used before:
// Samples for the epoch the run stood in, none of a later one.
func (p Position) Used(epoch int) int {
	if epoch != p.Epoch {
		return 0
	}
	return p.Samples
}

// Resumer is a replica's --checkpoint-dir: nil-safe, it does nothing
// without the flag.
type Resumer struct {
	ck                   *checkpoint.Checkpointer
	replicas, perReplica int
}

// Open starts the replica's checkpointer and restores the latest
// checkpoint into state, if there is one; it returns where that run
// stood (the zero Position for a fresh start) and whether it resumed.
// Rank 0 (rank0) says on out where it resumes and what changed when the
// replica count did. Close the Resumer when training ends.
func (p Preemption) Open(ctx context.Context, state *optim.Checkpoint, replicas, perReplica int, rank0 bool, out io.Writer) (*Resumer, Position, bool, error) {
	r := &Resumer{replicas: replicas, perReplica: perReplica}
	if p.Dir == "" {
		return r, Position{}, false, nil
	}
	var err error
	if r.ck, err = checkpoint.New(checkpoint.Options(p)); err != nil {
		return nil, Position{}, false, fmt.Errorf("--checkpoint-dir: %w", err)
	}
	resumed, err := r.ck.Restore(ctx, state)
	if err != nil {
		return nil, Position{}, false, errors.Join(fmt.Errorf("--checkpoint-dir: %w", err), r.ck.Close())
	}
	if !resumed {
		return r, Position{}, false, nil
	}
	samples, err1 := metaCount(state.Metadata, metaPosition, 0)
	wasReplicas, err2 := metaCount(state.Metadata, metaReplicas, 1)
	wasPerReplica, err3 := metaCount(state.Metadata, metaPerReplica, 1)
	if err := cmp.Or(err1, err2, err3); err != nil {
		return nil, Position{}, false, errors.Join(fmt.Errorf("--checkpoint-dir %s: %w: a checkpoint this example did not write; "+
			"move it away to start afresh", p.Dir, err), r.ck.Close())
	}
	at := Position{Epoch: state.Epoch, Samples: samples, Step: state.Step}
	// Step writes them afresh; --checkpoint's file never holds stale
	// ones. (A copy: the local replicas may share the map Restore read.)
	meta := maps.Clone(state.Metadata)
	for _, name := range []string{metaPosition, metaReplicas, metaPerReplica} {
		delete(meta, name)
	}
	state.Metadata = meta
	if rank0 {
		fmt.Fprintf(out, "resumed from %s at step %d (epoch %d, sample %d of its order)", p.Dir, at.Step, at.Epoch+1, at.Samples)
		if wasReplicas != replicas || wasPerReplica != perReplica {
			fmt.Fprintf(out, "; written by %d replicas of %d samples a step, now %d of %d: the epoch goes on from the same sample",
				wasReplicas, wasPerReplica, replicas, perReplica)
		}
		fmt.Fprintln(out)
	}
	return r, at, true, nil
}

// metaCount reads a checkpoint's count name, least at the smallest.
func metaCount(meta map[string]string, name string, least int) (int, error) {
	n, err := strconv.Atoi(meta[name])
	if err != nil || n < least {
		return 0, fmt.Errorf("the latest checkpoint's %s is %q, not a count", name, meta[name])
	}
	return n, nil
}

// Step is called by every replica after each step with where the run
// now stands: it writes a checkpoint when one is due or the job was
// asked to stop, and then returns checkpoint.ErrPreempted.
func (r *Resumer) Step(ctx context.Context, state optim.Checkpoint, at Position) error {
	if r.ck == nil {
		return nil
	}
	state.Epoch, state.Step = at.Epoch, at.Step
	meta := maps.Clone(state.Metadata)
	if meta == nil {
		meta = map[string]string{}
	}
	meta[metaPosition] = strconv.Itoa(at.Samples)
	meta[metaReplicas] = strconv.Itoa(r.replicas)
	meta[metaPerReplica] = strconv.Itoa(r.perReplica)
	state.Metadata = meta
	return r.ck.Step(ctx, state)
}

// Close waits for the checkpoint being written and returns its error.
func (r *Resumer) Close() error {
	if r == nil || r.ck == nil {
		return nil
	}
	return r.ck.Close()
}
