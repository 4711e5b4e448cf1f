package dist

import (
	"context"
	"errors"
	"fmt"

	"github.com/xladdp/xladdp/ddp/internal/flight"
	_ "github.com/xladdp/xladdp/ddp/internal/tcp" // the default transport
	"github.com/xladdp/xladdp/ddp/internal/transport"
)

// InitProcessGroup joins the group through o.Backend's transport: over
// tcp, it meets every other rank through the store (checking ranks are
// unique and agree on the world size), connects to each of them, and
// returns when all are connected or the timeout passes; over mpi, the
// ranks are mpirun's.
func InitProcessGroup(ctx context.Context, o Options) (*ProcessGroup, error) {
	if err := o.resolve(); err != nil {
		return nil, err
	}
	open, ok := transport.Lookup(o.Transport)
	if !ok {
		return nil, fmt.Errorf("ddp: backend %q is not built into this program: rebuild it with go build -tags %s "+
			"(needs Open MPI's libopenmpi-dev; make deps installs it), or use the default tcp backend", o.Transport, o.Transport)
	}
	g := &ProcessGroup{timeout: o.Timeout, transport: o.Transport, ops: make(chan *Work, 1024),
		flight: flight.New(max(0, o.FlightSize)), flightDir: o.FlightDir}
	opened, err := open(ctx, transport.Config{Name: o.Transport, InitMethod: o.InitMethod, Rank: o.Rank,
		WorldSize: o.WorldSize, LocalRank: o.LocalRank, LocalWorldSize: o.LocalWorldSize, Timeout: o.Timeout,
		Token: o.Token, Debug: o.Debug, Fail: g.fail, Broken: g.failure, Dump: g.dumpFlight})
	if err != nil {
		return nil, err
	}
	w := opened.World
	g.rank, g.size, g.localRank, g.localWorldSize = w.Rank, w.Size, w.LocalRank, w.LocalSize
	g.t, g.features, g.store = opened.Transport, opened.Features, opened.Store
	g.inliner, _ = g.t.(transport.Inliner)
	if o.BindCPUs {
		if err := bindLocalCPUs(g.localRank, g.localWorldSize); err != nil {
			return nil, errors.Join(err, g.t.Close(0))
		}
	}
	g.wg.Add(1)
	go g.executor()
	if g.flightDir != "" {
		g.dumpOnSignal()
	}
	return g, nil
}

// failure is the group's first failure, or nil.
func (g *ProcessGroup) failure() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.broken
}
