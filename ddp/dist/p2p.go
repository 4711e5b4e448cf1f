package dist

import (
	"context"
	"fmt"
	"time"
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

func offsets(splits []int) []int {
	o := make([]int, len(splits)+1)
	for i, s := range splits {
		o[i+1] = o[i] + s
	}
	return o
}

// AllToAllSingle sends in's r-th segment to rank r and receives rank r's
// segment for this rank into out's r-th segment; nil splits mean equal
// segments (torch's all_to_all_single).
func (g *ProcessGroup) AllToAllSingle(ctx context.Context, out, in Buffer, outSplits, inSplits []int) error {
	return g.allToAllSingle(ctx, out, in, outSplits, inSplits).Wait(ctx)
}

// AllToAllSingleAsync is AllToAllSingle without waiting.
func (g *ProcessGroup) AllToAllSingleAsync(out, in Buffer, outSplits, inSplits []int) *Work {
	return g.allToAllSingle(nil, out, in, outSplits, inSplits)
}

// allToAllSingle is AllToAllSingle; a nil ctx makes it AllToAllSingleAsync.
func (g *ProcessGroup) allToAllSingle(ctx context.Context, out, in Buffer, outSplits, inSplits []int) *Work {
	const op = "AllToAllSingle"
	if err := firstError(checkBuffer(op, in), checkBuffer(op, out)); err != nil {
		return finished(op, err)
	}
	if out.DType != in.DType {
		return finished(op, fmt.Errorf("ddp: %s: out is %s but in is %s", op, out.DType, in.DType))
	}
	inS, err := g.splitsOrEqual(op, "in", in, inSplits)
	if err != nil {
		return finished(op, err)
	}
	outS, err := g.splitsOrEqual(op, "out", out, outSplits)
	if err != nil {
		return finished(op, err)
	}
	if g.engine != nil {
		return g.engineOp(ctx, op, engineCall{kind: opAllToAll, in: in, out: out, inSplits: inS, outSplits: outS}, nil)
	}
	inO, outO := offsets(inS), offsets(outS)
	return g.submit(op, func(seq uint64, deadline time.Time) error {
		if err := g.checkSame(seq, fmt.Sprintf("AllToAllSingle(%s)", in.DType), deadline); err != nil {
			return err
		}
		var sent []sentJob
		for r, p := range g.peers {
			if p != nil {
				sent = append(sent, sentJob{r, p.send(kindCollective, tag(seq, 0, 0), g.opDesc, in.slice(inO[r], inO[r+1]).bytes, deadline)})
			}
		}
		copy(out.slice(outO[g.rank], outO[g.rank+1]).bytes, in.slice(inO[g.rank], inO[g.rank+1]).bytes)
		for r, p := range g.peers {
			if p == nil {
				continue
			}
			if err := p.recv(kindCollective, tag(seq, 0, 0), g.opDesc, out.slice(outO[r], outO[r+1]).bytes, deadline); err != nil {
				return peerError(r, err)
			}
		}
		return waitAll(sent)
	})
}

// Gather collects every rank's in at root into out, in rank order
// (out.Len() = WorldSize × in.Len() on root; out is unused elsewhere).
func (g *ProcessGroup) Gather(ctx context.Context, out, in Buffer, root int) error {
	return g.gather(ctx, out, in, root).Wait(ctx)
}

// GatherAsync is Gather without waiting.
func (g *ProcessGroup) GatherAsync(out, in Buffer, root int) *Work {
	return g.gather(nil, out, in, root)
}

// gather is Gather; a nil ctx makes it GatherAsync.
func (g *ProcessGroup) gather(ctx context.Context, out, in Buffer, root int) *Work {
	const op = "Gather"
	err := firstError(checkBuffer(op, in), g.checkRank(op, "root", root))
	if err == nil && g.rank == root {
		err = checkLen(op, "out", out, g.size*in.Len())
	}
	if err != nil {
		return finished(op, err)
	}
	if g.engine != nil {
		return g.engineOp(ctx, op, engineCall{kind: opGather, in: in, out: out, root: root}, nil)
	}
	return g.submit(op, func(seq uint64, deadline time.Time) error {
		if err := g.checkSame(seq, fmt.Sprintf("Gather(root %d, %s)", root, in), deadline); err != nil {
			return err
		}
		if g.rank != root {
			if err := waitAll([]sentJob{{root, g.peers[root].send(kindCollective, tag(seq, 0, 0), g.opDesc, in.bytes, deadline)}}); err != nil {
				return err
			}
			return g.awaitAcknowledgement(seq, root, deadline)
		}
		// The root's empty frame to every sender (sent first, so ranks that
		// disagree on the root, each only receiving, still see each other).
		acks := g.sendAcknowledgements(seq, deadline)
		n := in.Len()
		copy(out.slice(root*n, (root+1)*n).bytes, in.bytes)
		for r, p := range g.peers {
			if p == nil {
				continue
			}
			if err := p.recv(kindCollective, tag(seq, 0, 0), g.opDesc, out.slice(r*n, (r+1)*n).bytes, deadline); err != nil {
				return peerError(r, err)
			}
		}
		return waitAll(acks)
	})
}

// Scatter gives rank r the r-th block of root's in (in.Len() = WorldSize ×
// out.Len() on root; in is unused elsewhere).
func (g *ProcessGroup) Scatter(ctx context.Context, out, in Buffer, root int) error {
	return g.scatter(ctx, out, in, root).Wait(ctx)
}

// ScatterAsync is Scatter without waiting.
func (g *ProcessGroup) ScatterAsync(out, in Buffer, root int) *Work {
	return g.scatter(nil, out, in, root)
}

// scatter is Scatter; a nil ctx makes it ScatterAsync.
func (g *ProcessGroup) scatter(ctx context.Context, out, in Buffer, root int) *Work {
	const op = "Scatter"
	err := firstError(checkBuffer(op, out), g.checkRank(op, "root", root))
	if err == nil && g.rank == root {
		err = checkLen(op, "in", in, g.size*out.Len())
	}
	if err != nil {
		return finished(op, err)
	}
	if g.engine != nil {
		return g.engineOp(ctx, op, engineCall{kind: opScatter, in: in, out: out, root: root}, nil)
	}
	return g.submit(op, func(seq uint64, deadline time.Time) error {
		if err := g.checkSame(seq, fmt.Sprintf("Scatter(root %d, %s)", root, out), deadline); err != nil {
			return err
		}
		n := out.Len()
		if g.rank != root {
			if err := g.peers[root].recv(kindCollective, tag(seq, 0, 0), g.opDesc, out.bytes, deadline); err != nil {
				return peerError(root, err)
			}
			return g.acknowledge(seq, root, deadline)
		}
		var sent []sentJob
		for r, p := range g.peers {
			if p != nil {
				sent = append(sent, sentJob{r, p.send(kindCollective, tag(seq, 0, 0), g.opDesc, in.slice(r*n, (r+1)*n).bytes, deadline)})
			}
		}
		copy(out.bytes, in.slice(root*n, (root+1)*n).bytes)
		if err := waitAll(sent); err != nil {
			return err
		}
		return g.awaitAcknowledgements(seq, deadline)
	})
}

// Barrier returns once every rank has called it.
func (g *ProcessGroup) Barrier(ctx context.Context) error {
	if g.engine != nil {
		return g.engineRun(ctx, "Barrier", engineCall{kind: opBarrier}, nil)
	}
	return g.BarrierAsync().Wait(ctx)
}

// BarrierAsync is Barrier without waiting.
func (g *ProcessGroup) BarrierAsync() *Work {
	if g.engine != nil {
		return g.engineOp(nil, "Barrier", engineCall{kind: opBarrier}, nil)
	}
	return g.submit("Barrier", func(seq uint64, deadline time.Time) error {
		if err := g.checkSame(seq, "Barrier", deadline); err != nil {
			return err
		}
		_, err := g.exchange(kindCollective, seq, 0, nil, deadline)
		return err
	})
}

// Send sends buf to rank dst with a tag; the matching Recv on dst must give
// the same tag and size. It returns once the data has left this process.
func (g *ProcessGroup) Send(ctx context.Context, buf Buffer, dst int, tagValue uint32) error {
	return g.SendAsync(buf, dst, tagValue).Wait(ctx)
}

// SendAsync is Send without waiting (torch's isend): buf must not change
// until the Work is done.
func (g *ProcessGroup) SendAsync(buf Buffer, dst int, tagValue uint32) *Work {
	const op = "Send"
	if err := firstError(checkBuffer(op, buf), g.checkRank(op, "destination", dst)); err != nil {
		return finished(op, err)
	}
	if dst == g.rank {
		return finished(op, fmt.Errorf("ddp: Send to itself (rank %d)", dst))
	}
	if g.engine != nil {
		return g.engineP2P(op, engineCall{kind: opSend, buf: buf, root: dst, tag: tagValue})
	}
	return g.enqueue(op, false, func(_ uint64, deadline time.Time) (func() error, error) {
		job := g.peers[dst].send(kindP2P, uint64(tagValue), p2pDescriptor(buf), buf.bytes, deadline)
		return func() error { return waitAll([]sentJob{{dst, job}}) }, nil
	})
}

// Recv receives into buf what rank src sent with the same tag. Messages
// with other tags that arrive first are kept for their own Recv.
func (g *ProcessGroup) Recv(ctx context.Context, buf Buffer, src int, tagValue uint32) error {
	return g.RecvAsync(buf, src, tagValue).Wait(ctx)
}

// RecvAsync is Recv without waiting (torch's irecv).
func (g *ProcessGroup) RecvAsync(buf Buffer, src int, tagValue uint32) *Work {
	const op = "Recv"
	if err := firstError(checkBuffer(op, buf), g.checkRank(op, "source", src)); err != nil {
		return finished(op, err)
	}
	if src == g.rank {
		return finished(op, fmt.Errorf("ddp: Recv from itself (rank %d)", src))
	}
	if g.engine != nil {
		return g.engineP2P(op, engineCall{kind: opRecv, buf: buf, root: src, tag: tagValue})
	}
	return g.enqueue(op, false, func(_ uint64, deadline time.Time) (func() error, error) {
		if err := g.peers[src].recv(kindP2P, uint64(tagValue), p2pDescriptor(buf), buf.bytes, deadline); err != nil {
			return nil, peerError(src, err)
		}
		return nil, nil
	})
}

// p2pDescriptor lets a Recv check that the Send matching its tag sent the
// same dtype (the length is checked apart).
func p2pDescriptor(b Buffer) uint64 { return descriptor("P2P " + b.DType.String()) }
