package dist

import (
	"errors"
	"sync"

	"github.com/xladdp/xladdp/ddp/internal/flight"
	"github.com/xladdp/xladdp/ddp/internal/transport"
)

// The group of this process alone, made on first use by Current.
var (
	aloneOnce  sync.Once
	aloneGroup *ProcessGroup
)

// Current is the group this process trains in: the default group after
// Init, else this process alone (rank 0 of 1, alone on its host), whose
// collectives leave every rank's result as a group of one has it. A job
// of one process is that group, so no caller branches on a missing one.
// It lives as long as the process, as the default group does until
// Destroy; it has no store (nothing to rendezvous with).
func Current() *ProcessGroup {
	if g := Default(); g != nil {
		return g
	}
	aloneOnce.Do(func() {
		g := &ProcessGroup{size: 1, localWorldSize: 1, timeout: DefaultTimeout, transport: "alone", t: alone{},
			ops: make(chan *Work, 1024), flight: flight.New(0)}
		g.inliner = alone{}
		g.wg.Add(1)
		go g.executor()
		aloneGroup = g
	})
	return aloneGroup
}

// alone carries the collectives of a group of one: a reduction or a
// broadcast leaves the buffer as it is, a gather or scatter copies the
// rank's own part, and there is no peer to send to.
type alone struct{}

func (alone) Run(c transport.Call) error {
	switch c.Kind {
	case transport.AllReduce, transport.Broadcast, transport.Barrier:
		return nil
	case transport.AllGather, transport.ReduceScatter, transport.AllToAll, transport.Gather, transport.Scatter:
		copy(c.Out.Bytes(), c.In.Bytes())
		return nil
	}
	return errors.New("ddp: a point-to-point operation in a group of one process: there is no other rank")
}

func (a alone) Start(c transport.Call) (func() error, error) {
	err := a.Run(c)
	return func() error { return err }, nil
}

func (alone) Abort(error)        {}
func (alone) Interrupt()         {}
func (alone) Close(uint64) error { return nil }

// Inline runs every operation on the caller's goroutine: none waits.
func (alone) Inline(transport.Call) bool { return true }
