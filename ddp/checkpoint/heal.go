package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/ddp/internal/exchange"
	"github.com/xladdp/xladdp/internal/workerenv"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
	"github.com/xladdp/xladdp/xla/safetensors"
)

// fromPeer is a step a live process sent: its decoded file, who sent it
// and how large it was.
type fromPeer struct {
	file       safetensors.File
	step, root int
	size       int
}

// heal restores c from the step a process of the job holds for a joining
// node (hold.go), when one does, and reports whether it did: the lowest
// rank holding the newest such step sends its bytes over the process
// group, and every rank loads them as Load loads a file. Where the heal
// fails (a peer lost meanwhile), a process that held the step commits it
// to the checkpoint directory and says so, so that no completed step is
// lost (healLost).
func (ck *Checkpointer) heal(ctx context.Context, c *optim.Checkpoint) (bool, error) {
	dev, err := checkpointDevice(c.Model)
	if err != nil {
		return false, nil // nothing to heal; the directory's restore says what is wrong
	}
	g := dist.Current()
	mine := takeHeld(false)
	start := time.Now()
	got, err := exchange.HostOnce(ctx, dev, exchange.Timeout(g), "healing from a live peer's memory", func() (fromPeer, error) {
		return receiveHeld(ctx, g, mine, stateLimit(c))
	})
	if err != nil {
		return false, ck.healFailed(g, mine, err)
	}
	if got.step < 0 {
		return false, nil
	}
	name := fmt.Sprintf("the step %d rank %d held in memory", got.step, got.root)
	if err := restoreDecoded(dev, got.file, name, c); err != nil {
		return false, err
	}
	takeHeld(true)
	ck.healedFrom = fmt.Sprintf("rank %d's memory, a live peer (%s in %v)", got.root, sizeOf(got.size), time.Since(start).Round(time.Millisecond))
	if replica, _ := dev.Replica(); mine.step < 0 && replica == 0 {
		fmt.Fprintf(os.Stderr, "checkpoint: rank %d healed from %s: step %d, no file read\n", g.Rank(), ck.healedFrom, got.step)
	}
	return true, ck.opts.checkSettings(name, c.Metadata)
}

// receiveHeld agrees on the newest step a process holds and hands its
// bytes, from the lowest rank holding it, to every rank (step -1: none
// holds one). A length over limit is refused before anything is
// allocated for it.
func receiveHeld(ctx context.Context, g *dist.ProcessGroup, mine heldStep, limit int64) (fromPeer, error) {
	newest, root := []int64{int64(mine.step)}, []int64{math.MaxInt64}
	collective := g.WorldSize() > 1
	if collective {
		if err := g.AllReduce(ctx, dist.Int64s(newest), dist.Max); err != nil {
			return fromPeer{}, fmt.Errorf("checkpoint: asking which step the job's processes hold: %w", err)
		}
	}
	if newest[0] < 0 {
		return fromPeer{step: -1}, nil
	}
	if int64(mine.step) == newest[0] {
		root[0] = int64(g.Rank())
	}
	size := []int64{int64(len(mine.data))}
	if collective {
		if err := g.AllReduce(ctx, dist.Int64s(root), dist.Min); err != nil {
			return fromPeer{}, fmt.Errorf("checkpoint: choosing the rank that sends step %d: %w", newest[0], err)
		}
		if err := g.Broadcast(ctx, dist.Int64s(size), int(root[0])); err != nil {
			return fromPeer{}, fmt.Errorf("checkpoint: the size of step %d from rank %d: %w", newest[0], root[0], err)
		}
	}
	if size[0] <= 0 || size[0] > limit {
		return fromPeer{}, fmt.Errorf("checkpoint: rank %d sends step %d as %d bytes, outside what this model's state can be (1 to %d): "+
			"do all the ranks run the same program?", root[0], newest[0], size[0], limit)
	}
	data := mine.data
	if int64(g.Rank()) != root[0] {
		data = make([]byte, (size[0]+7)/8*8)
	}
	if collective {
		buf := data
		if len(buf)%8 != 0 {
			buf = append(data[:len(data):len(data)], make([]byte, 8-len(data)%8)...)
		}
		if err := g.Broadcast(ctx, dist.ByteBuffer(dist.Int64, buf), int(root[0])); err != nil {
			return fromPeer{}, fmt.Errorf("checkpoint: step %d from rank %d's memory: %w", newest[0], root[0], err)
		}
		data = buf
	}
	name := fmt.Sprintf("step %d from rank %d's memory", newest[0], root[0])
	file, err := safetensors.Decode(name, data[:size[0]])
	if err != nil {
		return fromPeer{}, err
	}
	return fromPeer{file: file, step: int(newest[0]), root: int(root[0]), size: int(size[0])}, nil
}

// stateLimit bounds a state a peer sends for c: its model's bytes eight
// times over (parameters, an optimizer's moments and master weights of a
// wider dtype), and 64 MiB for the metadata and the replicas' random
// states.
func stateLimit(c *optim.Checkpoint) int64 {
	var model int64
	for _, n := range nn.StateDict(c.Model) {
		if n.Tensor != nil {
			model += int64(n.Tensor.Shape().Memory())
		}
	}
	return 8*model + 64<<20
}

// healFailed is the heal's error: where this process held the step, it
// commits it first (healLost).
func (ck *Checkpointer) healFailed(g *dist.ProcessGroup, mine heldStep, err error) error {
	if mine.step < 0 {
		return fmt.Errorf("checkpoint: rank %d, joining the job, could not heal from a live peer: %w", g.Rank(), err)
	}
	path, commitErr := CommitHeld()
	if commitErr != nil {
		return errors.Join(err, commitErr)
	}
	what := fmt.Sprintf("a peer was lost (%v) while a joining node healed, after step %d, the last this replica completed; committed: %s",
		err, mine.step, path)
	noteErr := workerenv.WritePeerLossNote(os.Getenv(workerenv.FlightDir), g.Rank(), workerenv.Committed+what)
	return errors.Join(healLost(fmt.Sprintf("checkpoint: rank %d: %s; ddprun goes on from there", g.Rank(), what)), noteErr)
}

// healLost is the heal's failure once the held step is committed: as
// training.Loop.End's commit after a peer's loss, ddp.Run regroups the
// process (or it exits ExitPreempted) and the job resumes from it.
type healLost string

func (e healLost) Error() string           { return string(e) }
func (healLost) Is(target error) bool      { return target == ErrPreempted }
func (healLost) ExitStatus() int           { return ExitPreempted }
func (healLost) CommittedOnPeerLoss() bool { return true }

// HealedFrom says which live peer the last Restore healed from ("" when
// it read a file, or nothing).
func (ck *Checkpointer) HealedFrom() string { return ck.healedFrom }

// restoreDecoded loads a decoded checkpoint file into c on this replica,
// as Load does once it read one (name names it in errors).
func restoreDecoded(dev *xla.Device, file safetensors.File, name string, c *optim.Checkpoint) error {
	rng, ownRow, err := stageReplicaRNG(dev, file, name, c)
	if err != nil {
		return err
	}
	device := c.RNG
	if ownRow {
		c.RNG = nil // not "rng.device", replica 0's: this replica's own row
	}
	err = optim.RestoreCheckpoint(file, name, c)
	c.RNG = device
	if err != nil || rng == nil {
		return err
	}
	return c.RNG.SetRNGState(rng)
}
