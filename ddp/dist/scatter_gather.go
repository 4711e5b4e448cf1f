package dist

import (
	"context"
	"fmt"

	"github.com/xladdp/xladdp/ddp/internal/transport"
)

// splitsOrEqual returns per-rank element counts: splits, or equal parts.
func (g *ProcessGroup) splitsOrEqual(op, what string, b Buffer, splits []int) ([]int, error) {
	if splits == nil {
		if b.Len()%g.size != 0 {
			return nil, fmt.Errorf("ddp: %s: %s has %d elements, not divisible by %d ranks: give split sizes", op, what, b.Len(), g.size)
		}
		splits = make([]int, g.size)
		for i := range splits {
			splits[i] = b.Len() / g.size
		}
	}
	if len(splits) != g.size {
		return nil, fmt.Errorf("ddp: %s: %d %s split sizes for %d ranks", op, len(splits), what, g.size)
	}
	total := 0
	for _, s := range splits {
		if s < 0 {
			return nil, fmt.Errorf("ddp: %s: negative %s split size %d", op, what, s)
		}
		total += s
	}
	if total != b.Len() {
		return nil, fmt.Errorf("ddp: %s: %s split sizes %v add up to %d, but it has %d elements", op, what, splits, total, b.Len())
	}
	return splits, nil
}

// AllToAllSingle sends in's r-th segment to rank r and receives rank r's
// segment for this rank into out's r-th segment; nil splits mean equal
// segments (torch's all_to_all_single).
func (g *ProcessGroup) AllToAllSingle(ctx context.Context, out, in Buffer, outSplits, inSplits []int) error {
	c, err := g.allToAllSingleCall(out, in, outSplits, inSplits)
	return g.blocking(ctx, c, err)
}

// AllToAllSingleAsync is AllToAllSingle without waiting.
func (g *ProcessGroup) AllToAllSingleAsync(out, in Buffer, outSplits, inSplits []int) *Work {
	c, err := g.allToAllSingleCall(out, in, outSplits, inSplits)
	return g.async(c, err)
}

// allToAllSingleCall checks AllToAllSingle's arguments and makes its call.
func (g *ProcessGroup) allToAllSingleCall(out, in Buffer, outSplits, inSplits []int) (transport.Call, error) {
	const op = "AllToAllSingle"
	if err := firstError(in.Check(op), out.Check(op), checkSameDType(op, out, in)); err != nil {
		return transport.Call{Kind: transport.AllToAll}, err
	}
	inS, err := g.splitsOrEqual(op, "in", in, inSplits)
	if err != nil {
		return transport.Call{Kind: transport.AllToAll}, err
	}
	outS, err := g.splitsOrEqual(op, "out", out, outSplits)
	if err != nil {
		return transport.Call{Kind: transport.AllToAll}, err
	}
	return transport.Call{Kind: transport.AllToAll, In: in, Out: out, InSplits: inS, OutSplits: outS}, nil
}

// Gather collects every rank's in at root into out, in rank order
// (out.Len() = WorldSize × in.Len() on root; out is unused elsewhere).
func (g *ProcessGroup) Gather(ctx context.Context, out, in Buffer, root int) error {
	c, err := g.gatherCall(out, in, root)
	return g.blocking(ctx, c, err)
}

// GatherAsync is Gather without waiting.
func (g *ProcessGroup) GatherAsync(out, in Buffer, root int) *Work {
	c, err := g.gatherCall(out, in, root)
	return g.async(c, err)
}

// gatherCall checks Gather's arguments and makes its call.
func (g *ProcessGroup) gatherCall(out, in Buffer, root int) (transport.Call, error) {
	return g.rootedCall(transport.Gather, "Gather", out, in, root)
}

// rootedCall checks a Gather's or Scatter's arguments and makes its call:
// the block every rank has (Gather's in, Scatter's out) and root's whole,
// WorldSize blocks long (Gather's out, Scatter's in).
func (g *ProcessGroup) rootedCall(kind transport.Kind, op string, out, in Buffer, root int) (transport.Call, error) {
	block, whole, wholeName := in, out, "out"
	if kind == transport.Scatter {
		block, whole, wholeName = out, in, "in"
	}
	err := firstError(block.Check(op), g.checkRank(op, "root", root))
	if err == nil && g.rank == root {
		err = checkLen(op, wholeName, whole, g.size*block.Len())
	}
	if err != nil {
		return transport.Call{Kind: kind}, err
	}
	return transport.Call{Kind: kind, In: in, Out: out, Root: root}, nil
}

// Scatter gives rank r the r-th block of root's in (in.Len() = WorldSize ×
// out.Len() on root; in is unused elsewhere).
func (g *ProcessGroup) Scatter(ctx context.Context, out, in Buffer, root int) error {
	c, err := g.scatterCall(out, in, root)
	return g.blocking(ctx, c, err)
}

// ScatterAsync is Scatter without waiting.
func (g *ProcessGroup) ScatterAsync(out, in Buffer, root int) *Work {
	c, err := g.scatterCall(out, in, root)
	return g.async(c, err)
}

// scatterCall checks Scatter's arguments and makes its call.
func (g *ProcessGroup) scatterCall(out, in Buffer, root int) (transport.Call, error) {
	return g.rootedCall(transport.Scatter, "Scatter", out, in, root)
}
