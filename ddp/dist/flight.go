package dist

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/xladdp/xladdp/ddp/internal/flight"
	"github.com/xladdp/xladdp/ddp/internal/termination"
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

// Busy declares what this rank does outside the collectives until the
// returned end ("evaluating" a test set, say): its flight record says
// so, and ddprun's stall watch takes a long time without a collective
// for that work rather than a stall. Begins nest; end may be called
// more than once.
func (g *ProcessGroup) Busy(what string) (end func()) { return g.busy.Begin(what) }

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

// dumpOnSignal makes SIGUSR1 write the flight record into g.flightDir
// (until Destroy), as a hang's first aid. On the mpi backend SIGTERM
// writes it too, then ends the process as SIGTERM would: it is how
// mpirun ends the other ranks when one fails; unless a checkpoint.Checkpointer
// holds termination, which then checkpoints and exits.
func (g *ProcessGroup) dumpOnSignal() {
	g.signals, g.signalsDone = make(chan os.Signal, 1), make(chan struct{})
	signal.Notify(g.signals, syscall.SIGUSR1)
	if g.transport == TransportMPI {
		signal.Notify(g.signals, syscall.SIGTERM)
	}
	g.signalsWG.Add(1)
	go func() {
		defer g.signalsWG.Done()
		for {
			select {
			case sig := <-g.signals:
				if sig != syscall.SIGTERM {
					g.dumpFlight("SIGUSR1")
					continue
				}
				if termination.Held() {
					// A checkpointer stops the job at the end of the step.
					g.dumpFlight("SIGTERM (preempted: checkpointing)")
					continue
				}
				g.dumpFlight("SIGTERM (mpirun ends the job)")
				signal.Reset(syscall.SIGTERM)
				_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
				return
			case <-g.signalsDone:
				return
			}
		}
	}()
}

// stopSignals ends dumpOnSignal's goroutine.
func (g *ProcessGroup) stopSignals() {
	if g.signals == nil {
		return
	}
	signal.Stop(g.signals)
	close(g.signalsDone)
	g.signalsWG.Wait()
}

// dumpFlight writes the flight record into the dump directory, if there
// is one; a failure to write is reported on stderr, since the job is
// already failing or being inspected.
func (g *ProcessGroup) dumpFlight(reason string) {
	if g.flightDir == "" {
		return
	}
	d := flight.Dump{Rank: g.rank, World: g.size, Transport: g.transport, Reason: reason, Entries: g.flight.Snapshot(),
		Busy: g.busy.Now()}
	if err := flight.Write(g.flightDir, d); err != nil {
		fmt.Fprintf(os.Stderr, "ddp: rank %d: writing the flight record: %v\n", g.rank, err)
	}
}
