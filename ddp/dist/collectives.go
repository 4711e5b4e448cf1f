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
	c, err := g.broadcastCall(buf, root)
	return g.blocking(ctx, c, err)
}

// BroadcastAsync is Broadcast without waiting.
func (g *ProcessGroup) BroadcastAsync(buf Buffer, root int) *Work {
	c, err := g.broadcastCall(buf, root)
	return g.async(c, err)
}

// broadcastCall checks Broadcast's arguments and makes its call.
func (g *ProcessGroup) broadcastCall(buf Buffer, root int) (transport.Call, error) {
	if err := firstError(buf.Check("Broadcast"), g.checkRank("Broadcast", "root", root)); err != nil {
		return transport.Call{Kind: transport.Broadcast}, err
	}
	return transport.Call{Kind: transport.Broadcast, Buf: buf, Root: root}, nil
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
	c, err := g.allGatherCall(out, in)
	return g.blocking(ctx, c, err)
}

// AllGatherAsync is AllGather without waiting.
func (g *ProcessGroup) AllGatherAsync(out, in Buffer) *Work {
	c, err := g.allGatherCall(out, in)
	return g.async(c, err)
}

// allGatherCall checks AllGather's arguments and makes its call.
func (g *ProcessGroup) allGatherCall(out, in Buffer) (transport.Call, error) {
	if err := firstError(in.Check("AllGather"), checkLen("AllGather", "out", out, g.size*in.Len()),
		checkSameDType("AllGather", out, in)); err != nil {
		return transport.Call{Kind: transport.AllGather}, err
	}
	return transport.Call{Kind: transport.AllGather, In: in, Out: out}, nil
}

// ReduceScatter reduces in across ranks with op and gives rank r the r-th
// block (in.Len() = WorldSize × out.Len()); in is left unchanged.
func (g *ProcessGroup) ReduceScatter(ctx context.Context, out, in Buffer, op ReduceOp) error {
	c, err := g.reduceScatterCall(out, in, op)
	return g.blocking(ctx, c, err)
}

// ReduceScatterAsync is ReduceScatter without waiting.
func (g *ProcessGroup) ReduceScatterAsync(out, in Buffer, op ReduceOp) *Work {
	c, err := g.reduceScatterCall(out, in, op)
	return g.async(c, err)
}

// reduceScatterCall checks ReduceScatter's arguments and makes its call.
func (g *ProcessGroup) reduceScatterCall(out, in Buffer, op ReduceOp) (transport.Call, error) {
	if err := firstError(in.Check("ReduceScatter"), checkOp("ReduceScatter", op),
		checkLen("ReduceScatter", "in", in, g.size*out.Len()), checkSameDType("ReduceScatter", out, in)); err != nil {
		return transport.Call{Kind: transport.ReduceScatter}, err
	}
	return transport.Call{Kind: transport.ReduceScatter, In: in, Out: out, Op: op}, nil
}

// Barrier returns once every rank has called it.
func (g *ProcessGroup) Barrier(ctx context.Context) error {
	return g.run(ctx, transport.Call{Kind: transport.Barrier})
}

// BarrierAsync is Barrier without waiting.
func (g *ProcessGroup) BarrierAsync() *Work { return g.queue(transport.Call{Kind: transport.Barrier}) }
