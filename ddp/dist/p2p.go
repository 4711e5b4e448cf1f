package dist

import (
	"context"
	"fmt"

	"github.com/xladdp/xladdp/ddp/internal/transport"
)

// Send sends buf to rank dst with a tag; the matching Recv on dst must give
// the same tag and size. It returns once the data has left this process.
func (g *ProcessGroup) Send(ctx context.Context, buf Buffer, dst int, tagValue uint32) error {
	return g.SendAsync(buf, dst, tagValue).Wait(ctx)
}

// SendAsync is Send without waiting (torch's isend): buf must not change
// until the Work is done.
func (g *ProcessGroup) SendAsync(buf Buffer, dst int, tagValue uint32) *Work {
	const op = "Send"
	if err := firstError(buf.Check(op), g.checkRank(op, "destination", dst)); err != nil {
		return finished(op, err)
	}
	if dst == g.rank {
		return finished(op, fmt.Errorf("ddp: Send to itself (rank %d)", dst))
	}
	return g.pointToPoint(transport.Call{Kind: transport.Send, Buf: buf, Root: dst, Tag: tagValue})
}

// Recv receives into buf what rank src sent with the same tag. Messages
// with other tags that arrive first are kept for their own Recv.
func (g *ProcessGroup) Recv(ctx context.Context, buf Buffer, src int, tagValue uint32) error {
	return g.RecvAsync(buf, src, tagValue).Wait(ctx)
}

// RecvAsync is Recv without waiting (torch's irecv).
func (g *ProcessGroup) RecvAsync(buf Buffer, src int, tagValue uint32) *Work {
	const op = "Recv"
	if err := firstError(buf.Check(op), g.checkRank(op, "source", src)); err != nil {
		return finished(op, err)
	}
	if src == g.rank {
		return finished(op, fmt.Errorf("ddp: Recv from itself (rank %d)", src))
	}
	return g.pointToPoint(transport.Call{Kind: transport.Recv, Buf: buf, Root: src, Tag: tagValue})
}
