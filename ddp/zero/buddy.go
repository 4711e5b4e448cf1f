package zero

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/xladdp/xladdp/ddp/internal/exchange"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/safetensors"
)

// A shard lives on its replica alone, so a lost node would take its
// replicas' optimizer state with it. With buddy copies on
// (KeepBuddyCopies; training.Loop turns them on where the job keeps
// checkpoints), every Step, once the update is computed and before the
// parameters are all-gathered, each process hands its replicas' pieces
// (shard, updated parameters, random state, the module's other state) to
// its buddy, the process of the same local rank on the next node, and
// takes its ward's. A process joins the all-gather only once that
// exchange returned, so a replica whose all-gather of step k returned
// knows that every process holds its ward's pieces of step k: after one
// node is lost, the survivors hold every shard of the last step any of
// them completed. The last two steps are kept, since a survivor may have
// computed the next update before the loss.
const (
	pieceFormat  = "xladdp-zero1-piece/1"
	paramKey     = "param.%d" // a bucket's updated parameters, where the master dtype differs
	modulePrefix = "module."  // the module's state that is not a sharded parameter
	keptSteps    = 2
)

// heldStep is what a process holds of one step: its local replicas'
// pieces and its ward's (the ward's local replicas'), each an encoded
// safetensors file.
type heldStep struct {
	step      int
	own, ward [][]byte
	wardRank  int
}

// KeepBuddyCopies turns on the buddy copies for a job of several
// processes (on one process there is no peer to lose). Every replica
// calls it at the same point, before its first Step.
func (z *ZeroRedundancyOptimizer) KeepBuddyCopies() { z.buddies = z.pg.WorldSize() > 1 }

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
	piece, err := z.piece(ctx)
	if err != nil {
		return fmt.Errorf("keeping step %d's buddy copy: %w", z.updates, err)
	}
	timeout := exchange.Timeout(z.pg)
	pieces, err := exchange.GatherLocal(ctx, z.dev, timeout, "the buddy copies", piece)
	if err != nil {
		return err
	}
	held, err := exchange.HostOnce(ctx, z.dev, timeout, "the buddy copies", func() (heldStep, error) {
		to, from := buddyRanks(z.pg.Rank(), z.pg.WorldSize(), z.pg.LocalWorldSize())
		blob := framePieces(pieces)
		got, err := exchange.ShiftBytes(ctx, z.pg, blob, to, from, 2*int64(len(blob))+1<<20)
		if err != nil {
			return heldStep{}, err
		}
		ward, err := unframePieces(got, len(pieces))
		if err != nil {
			return heldStep{}, fmt.Errorf("rank %d's buddy copies: %w", from, err)
		}
		return heldStep{step: z.updates, own: pieces, ward: ward, wardRank: from}, nil
	})
	if err != nil {
		return err
	}
	z.held = append(z.held[max(0, len(z.held)-keptSteps+1):], held)
	return nil
}

// piece encodes this replica's part of the step just updated: its shard
// state, its random state, its block of the updated parameters where
// they are not the masters' dtype, and the module's state that no shard
// holds (buffers, empty parameters), which every replica holds alike.
func (z *ZeroRedundancyOptimizer) piece(ctx context.Context) ([]byte, error) {
	named := append(z.State(), nn.Named{Name: rngName, Tensor: z.dev.RNGState()})
	for b, bucket := range z.buckets {
		if bucket.masterDType() != bucket.DType {
			named = append(named, nn.Named{Name: fmt.Sprintf(paramKey, b), Tensor: z.masters[b].Detach().Cast(bucket.DType)})
		}
	}
	named = append(named, z.moduleRest()...)
	if err := z.dev.MarkStep(ctx); err != nil {
		return nil, err
	}
	tensors, err := nn.EncodeTensors(ctx, named)
	if err != nil {
		return nil, err
	}
	meta := map[string]string{"format": pieceFormat, "replica": strconv.Itoa(z.replica), "replicas": strconv.Itoa(z.replicas),
		"step": strconv.Itoa(z.updates), "lr": strconv.FormatFloat(z.LR(), 'g', -1, 64)}
	return safetensors.Encode(safetensors.File{Metadata: meta, Tensors: tensors})
}

// moduleRest is the module's state dict without the sharded parameters,
// named with modulePrefix.
func (z *ZeroRedundancyOptimizer) moduleRest() []nn.Named {
	sharded := make(map[*xla.Tensor]bool, len(z.params))
	for _, p := range z.params {
		sharded[p.Tensor] = true
	}
	var out []nn.Named
	for _, s := range nn.StateDict(z.module) {
		if !sharded[s.Tensor] {
			out = append(out, nn.Named{Name: modulePrefix + s.Name, Tensor: s.Tensor})
		}
	}
	return out
}

// framePieces lays pieces end to end after their count and lengths.
func framePieces(pieces [][]byte) []byte {
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(pieces)))
	for _, p := range pieces {
		out = binary.LittleEndian.AppendUint64(out, uint64(len(p)))
	}
	for _, p := range pieces {
		out = append(out, p...)
	}
	return out
}

// unframePieces splits what framePieces laid out, count pieces, each
// length checked against what arrived.
func unframePieces(blob []byte, count int) ([][]byte, error) {
	head := 8 * (1 + count)
	if len(blob) < head || binary.LittleEndian.Uint64(blob) != uint64(count) {
		return nil, fmt.Errorf("not %d framed pieces (%d bytes)", count, len(blob))
	}
	out := make([][]byte, count)
	at := uint64(head)
	for i := range out {
		n := binary.LittleEndian.Uint64(blob[8*(1+i):])
		if n > uint64(len(blob))-at {
			return nil, fmt.Errorf("piece %d of %d bytes overruns the %d received", i, n, len(blob))
		}
		out[i] = blob[at : at+n]
		at += n
	}
	if at != uint64(len(blob)) {
		return nil, fmt.Errorf("%d bytes after the last piece", uint64(len(blob))-at)
	}
	return out, nil
}
