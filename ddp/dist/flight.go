package dist

import (
	"github.com/xladdp/xladdp/ddp/internal/flight"
	"github.com/xladdp/xladdp/ddp/internal/transport"
)

// FlightEntry is one operation in a group's flight record: its sequence
// number (collectives in the order every rank shares, point-to-point
// operations apart), op, dtype, element count, peer or root, state
// (issued, started, done, failed), times, and the file:line of the user
// code that issued it.
type FlightEntry = flight.Entry

// FlightRecord returns the last operations this rank issued (up to
// 2048), oldest first: what torch's flight recorder keeps, always on.
// Compared across ranks it names the collective a rank never joined.
func (g *ProcessGroup) FlightRecord() []FlightEntry { return g.flight.Snapshot() }

// flightOp is what the recorder keeps of call c, numbered seq.
func flightOp(c transport.Call, seq uint64, p2p bool) flight.Op {
	op := flight.Op{Seq: seq, P2P: p2p, Name: c.Kind.String(), Peer: -1}
	buf := c.Buf
	switch c.Kind {
	case transport.AllGather, transport.ReduceScatter, transport.AllToAll, transport.Gather, transport.Scatter:
		buf = c.In
	}
	if buf.DType != 0 {
		op.DType, op.Count = buf.DType.String(), buf.Len()
	}
	switch c.Kind {
	case transport.Send, transport.Recv, transport.Broadcast, transport.Gather, transport.Scatter:
		op.Peer = c.Root
	}
	return op
}
