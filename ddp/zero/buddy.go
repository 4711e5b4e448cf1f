package zero

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"

	"github.com/xladdp/xladdp/ddp/internal/crossing"
	"github.com/xladdp/xladdp/ddp/internal/exchange"
	"github.com/xladdp/xladdp/internal/knobs"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/safetensors"
)

// A shard lives on its replica alone, so a lost node would take its
// replicas' optimizer state with it. With buddy copies on
// (KeepBuddyCopies; training.Loop turns them on where the job keeps
// checkpoints), every Step, once the update is computed and before the
// parameters are all-gathered, each process hands its replicas' pieces to
// its buddy, the process of the same local rank on the next node, and
// takes its ward's. A piece is what only its replica holds of the step:
// the optimizer's state of its shard, its master weights where they are
// not the parameters' dtype (the all-gather hands every replica the
// others' float32 parameters), its random state. A process joins the
// all-gather only once that exchange returned, so a replica whose
// all-gather of step k returned knows that every process holds its
// ward's pieces of step k: after one node is lost, the survivors hold
// every shard of the last step any of them completed, and that survivor
// the model. The last two steps are kept, since a survivor may have
// computed the next update before the loss.
const (
	pieceFormat = "xladdp-zero1-piece/1"
	keptSteps   = 2
)

// heldStep is what a process holds of one step: its local replicas'
// pieces end to end and its ward's, each piece an encoded safetensors
// file at a multiple of the slots' stride.
type heldStep struct {
	step                int
	own, ward           []byte
	wardRank            int
	ownValid, wardValid bool
}

// buddySlots is a process's buffers for the buddy copies, which its local
// replicas share: keptSteps slots reused from step to step (a step
// allocates nothing), the oldest overwritten next. A piece's layout (its
// tensors' names, dtypes and shapes) is the same on every replica and at
// every step: its header is written once.
type buddySlots struct {
	header  []byte
	offsets []int // each tensor's data in a piece; the last is pieceMeta's
	size    int   // a piece file's bytes
	stride  int   // size padded to whole words
	slots   [keptSteps]heldStep
	next    int
}

// keptRest is the module's state that no shard holds (buffers such as
// BatchNorm's statistics) as it stood at a held step: a survivor's
// commit writes it with the step's parameters, not what the forward of
// the step it lost has made of it since.
type keptRest struct {
	step    int
	tensors []safetensors.Tensor
}

// moduleRest is the module's state dict without the sharded parameters.
func (z *ZeroRedundancyOptimizer) moduleRest() []nn.Named {
	sharded := make(map[*xla.Tensor]bool, len(z.params))
	for _, p := range z.params {
		sharded[p.Tensor] = true
	}
	var out []nn.Named
	for _, s := range nn.StateDict(z.module) {
		if !sharded[s.Tensor] {
			out = append(out, s)
		}
	}
	return out
}

// pieceMeta is a piece's tensor of what it is: replica, replicas, step,
// learning rate (float64s).
const pieceMeta = "piece.meta"

// KeepBuddyCopies turns on the buddy copies for a job of several
// processes (on one process there is no peer to lose), unless
// $XLADDP_ZERO_BUDDIES is off. Every replica calls it at the same point,
// before its first Step: the ranks agree, so a value one rank cannot
// read, or one that differs between ranks, is every rank's error, naming
// the ranks.
func (z *ZeroRedundancyOptimizer) KeepBuddyCopies(ctx context.Context) error {
	on, err := knobs.ZeroBuddies(os.Getenv(knobs.EnvZeroBuddies))
	if err != nil {
		err = fmt.Errorf("%w (on rank %d)", err, z.pg.Rank())
	}
	if err := z.agree(ctx, "reading $"+knobs.EnvZeroBuddies, err); err != nil {
		return fmt.Errorf("zero: %w", err)
	}
	flag := int32(0)
	if on {
		flag = 1
	}
	flags, err := exchange.HostOnce(ctx, z.dev, exchange.Timeout(z.pg), "comparing $"+knobs.EnvZeroBuddies, func() ([]int32, error) {
		return z.allGatherFlags(ctx, flag)
	})
	if err != nil {
		return fmt.Errorf("zero: comparing $%s: %w", knobs.EnvZeroBuddies, err)
	}
	var off []int
	for r, f := range flags {
		if f == 0 {
			off = append(off, r)
		}
	}
	if len(off) > 0 && len(off) < len(flags) {
		return fmt.Errorf("zero: $%s is off on rank(s) %v and on elsewhere: give every node the same value", knobs.EnvZeroBuddies, off)
	}
	z.buddies = on && z.pg.WorldSize() > 1
	return nil
}

// buddyRanks are the rank this process hands its pieces to and the rank
// it holds pieces for: the same local rank on the next node (on the
// previous one), or the next rank (the previous) when the job is one
// node.
func buddyRanks(rank, size, perNode int) (to, from int) {
	stride := perNode
	if perNode <= 0 || perNode >= size || size%perNode != 0 {
		stride = 1
	}
	return (rank + stride) % size, (rank - stride + size) % size
}

// keep counts the update just traced and, with buddy copies on, hands
// this step's pieces to the buddy: before the all-gather.
func (z *ZeroRedundancyOptimizer) keep(ctx context.Context) error {
	z.updates++
	if !z.buddies {
		return nil
	}
	if err := z.keepPieces(ctx); err != nil {
		return fmt.Errorf("keeping step %d's buddy copies: %w", z.updates, err)
	}
	return nil
}

// keepPieces runs the update's program, keeps the module's other state
// as of this step, writes this replica's piece into the oldest slot and,
// once every local replica did, shifts the process's pieces to its buddy
// and takes its ward's; a failed shift leaves the slot's own pieces
// valid and its ward's not.
func (z *ZeroRedundancyOptimizer) keepPieces(ctx context.Context) error {
	named := z.pieceTensors()
	if err := z.dev.MarkStep(ctx); err != nil {
		return err
	}
	timeout := exchange.Timeout(z.pg)
	if z.slots == nil {
		slots, err := exchange.HostOnce(ctx, z.dev, timeout, "allocating the buddy copies", func() (*buddySlots, error) {
			return newBuddySlots(named, z.local)
		})
		if err != nil {
			return err
		}
		z.slots = slots
	}
	slot := z.slots.next
	held := &z.slots.slots[slot]
	rest, err := nn.EncodeTensors(ctx, z.moduleRest())
	if err != nil {
		return err
	}
	z.rest[slot] = keptRest{step: z.updates, tensors: rest}
	index, _ := z.dev.Replica()
	if err := z.writePiece(ctx, held.own[index*z.slots.stride:][:z.slots.size], named); err != nil {
		return err
	}
	if _, err := exchange.GatherLocal(ctx, z.dev, timeout, "the buddy copies", struct{}{}); err != nil {
		return err
	}
	_, err = exchange.HostOnce(ctx, z.dev, timeout, "the buddy copies", func() (struct{}, error) {
		to, from := buddyRanks(z.pg.Rank(), z.pg.WorldSize(), z.pg.LocalWorldSize())
		held.step, held.wardRank, held.ownValid, held.wardValid = z.updates, from, true, false
		if err := crossing.ShiftBytes(ctx, z.pg, held.own, held.ward, to, from); err != nil {
			return struct{}{}, err
		}
		held.wardValid = true
		z.slots.next = (z.slots.next + 1) % keptSteps
		return struct{}{}, nil
	})
	return err
}

// pieceTensors are this replica's piece of the step just updated: the
// optimizer's state of its shard, its masters where their dtype is not
// the parameters', its random state.
func (z *ZeroRedundancyOptimizer) pieceTensors() []nn.Named {
	named := append([]nn.Named(nil), z.inner.State()...)
	for b, bucket := range z.buckets {
		if bucket.masterDType() != bucket.DType {
			named = append(named, nn.Named{Name: fmt.Sprintf("master.%d", b), Tensor: z.masters[b]})
		}
	}
	return append(named, nn.Named{Name: rngName, Tensor: z.dev.RNGState()})
}

// newBuddySlots lays out a piece of named (and its pieceMeta) and
// allocates the slots of local replicas' pieces.
func newBuddySlots(named []nn.Named, local int) (*buddySlots, error) {
	layout := make([]safetensors.Layout, 0, len(named)+1)
	for _, n := range named {
		layout = append(layout, safetensors.Layout{Name: n.Name, DType: nn.SafetensorsDType(n.Tensor.DType()), Shape: n.Tensor.Dims()})
	}
	layout = append(layout, safetensors.Layout{Name: pieceMeta, DType: "F64", Shape: []int{4}})
	header, offsets, size, err := safetensors.LayOut(map[string]string{"format": pieceFormat}, layout)
	if err != nil {
		return nil, err
	}
	s := &buddySlots{header: header, offsets: offsets, size: size, stride: (size + 7) / 8 * 8}
	for i := range s.slots {
		s.slots[i].own = make([]byte, local*s.stride)
		s.slots[i].ward = make([]byte, local*s.stride)
	}
	return s, nil
}

// writePiece writes this replica's piece of named into dst, its slot.
func (z *ZeroRedundancyOptimizer) writePiece(ctx context.Context, dst []byte, named []nn.Named) error {
	s := z.slots
	copy(dst, s.header)
	for i, n := range named {
		if err := n.Tensor.CopyBytesTo(ctx, dst[s.offsets[i]:s.offsets[i]+int(n.Tensor.Shape().Memory())]); err != nil {
			return fmt.Errorf("reading %s: %w", n.Name, err)
		}
	}
	meta := dst[s.offsets[len(named)]:]
	for i, v := range []float64{float64(z.replica), float64(z.replicas), float64(z.updates), z.LR()} {
		binary.LittleEndian.PutUint64(meta[8*i:], math.Float64bits(v))
	}
	return nil
}
