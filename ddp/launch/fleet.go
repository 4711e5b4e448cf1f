package launch

import (
	"context"
	"fmt"
	"time"

	"github.com/xladdp/xladdp/ddp/internal/flight"
)

// FleetAgent is one node's agent running the launcher's real control
// plane with no workers: its rendezvous, its watch over the other nodes,
// its failure broadcast and its flight records' exchange. It is the one
// door package fleetsim needs to play a job's control plane at fleet
// size on one machine (examples/bench/fleet); ddprun never uses it.
type FleetAgent struct {
	r *rendezvous
	a assignment
	w nodeWatch
}

// OpenFleetAgent connects node c.NodeRank's agent to c's rendezvous
// store, hosting it where ddprun would (static: node 0).
func OpenFleetAgent(ctx context.Context, c Config) (*FleetAgent, error) {
	m, err := openMeeting(ctx, c, "", func(string, ...any) {})
	if err != nil {
		return nil, err
	}
	r, ok := m.(*rendezvous)
	if !ok {
		m.close()
		return nil, fmt.Errorf("fleet agent: node %d meets alone: give it a rendezvous endpoint", c.NodeRank)
	}
	return &FleetAgent{r: r}, nil
}

// Join meets the other agents in the job's first round.
func (f *FleetAgent) Join(ctx context.Context) error {
	a, err := f.r.join(ctx, 0)
	if err != nil {
		return err
	}
	f.a, f.w = a, f.r.watch(a.round, a)
	return nil
}

// Tick is one monitor tick of the joined round: why the round must end,
// or "", or the error of a store that stopped answering.
func (f *FleetAgent) Tick(ctx context.Context) (string, error) { return f.w.tick(ctx) }

// Fail posts this node's failure of the joined round, seen at seen.
func (f *FleetAgent) Fail(ctx context.Context, why string, seen time.Time) error {
	return f.r.fail(ctx, f.a.round, f.a.node, why, seen)
}

// ExchangeFlight posts this node's flight records and, when gather,
// returns every node's (each other node's last collectives only).
func (f *FleetAgent) ExchangeFlight(ctx context.Context, local []flight.Dump, gather bool) ([]flight.Dump, error) {
	return f.r.exchangeFlight(ctx, f.a, local, gather)
}

// Close leaves the store (draining it on its host).
func (f *FleetAgent) Close() { f.r.close() }
