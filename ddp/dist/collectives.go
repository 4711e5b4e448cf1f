package dist

import (
	"context"
	"fmt"

	"github.com/xladdp/xladdp/ddp/internal/transport"
)

// AllReduce combines buf across all ranks with op, in place. A small
// buffer on a same-host group runs on the caller's goroutine when nothing
// else is queued.
func (g *ProcessGroup) AllReduce(ctx context.Context, buf Buffer, op ReduceOp) error {
	if err := firstError(buf.Check("AllReduce"), checkOp("AllReduce", op)); err != nil {
		return err
	}
	return g.run(ctx, transport.Call{Kind: transport.AllReduce, Buf: buf, Op: op})
}

// AllReduceAsync is AllReduce without waiting; buf must not be touched
// until the Work is done.
func (g *ProcessGroup) AllReduceAsync(buf Buffer, op ReduceOp) *Work {
	if err := firstError(buf.Check("AllReduce"), checkOp("AllReduce", op)); err != nil {
		return finished("AllReduce", err)
	}
	return g.queue(transport.Call{Kind: transport.AllReduce, Buf: buf, Op: op})
}

func firstError(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// Broadcast copies root's buf into every rank's buf.
func (g *ProcessGroup) Broadcast(ctx context.Context, buf Buffer, root int) error {
	return g.broadcast(ctx, buf, root).Wait(ctx)
}

// BroadcastAsync is Broadcast without waiting.
func (g *ProcessGroup) BroadcastAsync(buf Buffer, root int) *Work { return g.broadcast(nil, buf, root) }

// broadcast is Broadcast; a nil ctx makes it BroadcastAsync.
func (g *ProcessGroup) broadcast(ctx context.Context, buf Buffer, root int) *Work {
	if err := firstError(buf.Check("Broadcast"), g.checkRank("Broadcast", "root", root)); err != nil {
		return finished("Broadcast", err)
	}
	return g.issue(ctx, transport.Call{Kind: transport.Broadcast, Buf: buf, Root: root})
}

func (g *ProcessGroup) checkRank(op, what string, r int) error {
	if r < 0 || r >= g.size {
		return fmt.Errorf("ddp: %s: %s %d outside [0, %d)", op, what, r, g.size)
	}
	return nil
}

func checkLen(op, what string, b Buffer, want int) error {
	if b.Len() != want {
		return fmt.Errorf("ddp: %s: %s has %d elements, want %d", op, what, b.Len(), want)
	}
	return nil
}

// checkSameDType fails when out and in hold different element types.
func checkSameDType(op string, out, in Buffer) error {
	if out.DType != in.DType {
		return fmt.Errorf("ddp: %s: out is %s but in is %s", op, out.DType, in.DType)
	}
	return nil
}

// AllGather concatenates every rank's in into out, in rank order
// (out.Len() = WorldSize × in.Len()).
func (g *ProcessGroup) AllGather(ctx context.Context, out, in Buffer) error {
	return g.allGather(ctx, out, in).Wait(ctx)
}

// AllGatherAsync is AllGather without waiting.
func (g *ProcessGroup) AllGatherAsync(out, in Buffer) *Work { return g.allGather(nil, out, in) }

// allGather is AllGather; a nil ctx makes it AllGatherAsync.
func (g *ProcessGroup) allGather(ctx context.Context, out, in Buffer) *Work {
	if err := firstError(in.Check("AllGather"), checkLen("AllGather", "out", out, g.size*in.Len()),
		checkSameDType("AllGather", out, in)); err != nil {
		return finished("AllGather", err)
	}
	return g.issue(ctx, transport.Call{Kind: transport.AllGather, In: in, Out: out})
}

// ReduceScatter reduces in across ranks with op and gives rank r the r-th
// block (in.Len() = WorldSize × out.Len()); in is left unchanged.
func (g *ProcessGroup) ReduceScatter(ctx context.Context, out, in Buffer, op ReduceOp) error {
	return g.reduceScatter(ctx, out, in, op).Wait(ctx)
}

// ReduceScatterAsync is ReduceScatter without waiting.
func (g *ProcessGroup) ReduceScatterAsync(out, in Buffer, op ReduceOp) *Work {
	return g.reduceScatter(nil, out, in, op)
}

// reduceScatter is ReduceScatter; a nil ctx makes it ReduceScatterAsync.
func (g *ProcessGroup) reduceScatter(ctx context.Context, out, in Buffer, op ReduceOp) *Work {
	if err := firstError(in.Check("ReduceScatter"), checkOp("ReduceScatter", op),
		checkLen("ReduceScatter", "in", in, g.size*out.Len()), checkSameDType("ReduceScatter", out, in)); err != nil {
		return finished("ReduceScatter", err)
	}
	return g.issue(ctx, transport.Call{Kind: transport.ReduceScatter, In: in, Out: out, Op: op})
}

// Barrier returns once every rank has called it.
func (g *ProcessGroup) Barrier(ctx context.Context) error {
	return g.run(ctx, transport.Call{Kind: transport.Barrier})
}

// BarrierAsync is Barrier without waiting.
func (g *ProcessGroup) BarrierAsync() *Work { return g.queue(transport.Call{Kind: transport.Barrier}) }
