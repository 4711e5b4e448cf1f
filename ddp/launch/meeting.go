package launch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/xladdp/xladdp/ddp/internal/flight"
	"github.com/xladdp/xladdp/ddp/launch/internal/preflight"
	"github.com/xladdp/xladdp/internal/freeport"
)

// meeting is how this node's agent meets the other nodes' for each
// round: alone (standalone, a single node with no rendezvous endpoint)
// or through the rendezvous store (*rendezvous: static or c10d). A round
// is an attempt of the job's, which a node admitted at a restart counts
// from the job's first.
type meeting interface {
	// join decides round's ranks (or a later round's, for a node behind
	// the job): this node's, the node count, the workers' store.
	join(ctx context.Context, round int) (assignment, error)
	// watch is round's watch over the other nodes.
	watch(round int, a assignment) nodeWatch
	// fail posts this node's failure of round, seen at seen.
	fail(ctx context.Context, round, node int, why string, seen time.Time) error
	// firstFailure names the earliest failure another node posted before
	// mine (waiting at most wait for one), or "".
	firstFailure(ctx context.Context, round, node, nnodes int, mine time.Time, wait time.Duration) (string, error)
	// exchangeFlight posts this node's flight records for the others and,
	// when gather, returns every node's (this node's alone, with the
	// error, when the store failed).
	exchangeFlight(ctx context.Context, a assignment, local []flight.Dump, gather bool) ([]flight.Dump, error)
	close()
}

// nodeWatch is one round's watch over the other nodes.
type nodeWatch interface {
	// tick beats this node's heartbeat and returns why the round must
	// end (another node's failure or loss), or "", or the error of a
	// store that stopped answering.
	tick(ctx context.Context) (string, error)
	// finish marks this node's workers done and waits as the meeting
	// needs (the store's host, for the others still using it); it
	// returns why the round failed meanwhile, or the store's error.
	finish(ctx context.Context) (string, error)
	// admitting is how many nodes waiting to join an elastic job the
	// round ends to admit, 0 for none (deciding it on node 0).
	admitting(ctx context.Context) (int, error)
	// decided is how many the round already ends to admit.
	decided(ctx context.Context) (int, error)
}

// standalone is a single node's meeting: it decides alone, and nobody
// else fails or needs its records.
type standalone struct{ cfg Config }

// join picks the workers' store: --master_addr and --master_port, or a
// free port when none was given, so jobs on one machine never collide.
func (s standalone) join(_ context.Context, round int) (assignment, error) {
	c := s.cfg
	host := orLocal(c.MasterAddr)
	port := c.MasterPort
	if _, given := c.Sources["master_port"]; !given {
		p, err := freeport.Pick("")
		if err != nil {
			return assignment{}, fmt.Errorf("the workers' store: %w", err)
		}
		port = p
	} else if isLocal(host) {
		// Worker rank 0 would fail to listen, the others to connect: say
		// who holds it before starting them.
		if f := preflight.PortFree("/proc", port, fmt.Sprintf("--master_port=%d", port),
			"pick another port, or leave --master_port unset and ddprun picks a free one"); f != nil {
			return assignment{}, errors.New(f.String())
		}
	}
	return assignment{round: round, node: 0, nnodes: 1, world: c.NProcPerNode, master: net.JoinHostPort(host, strconv.Itoa(port))}, nil
}

func (standalone) watch(int, assignment) nodeWatch                         { return aloneWatch{} }
func (standalone) fail(context.Context, int, int, string, time.Time) error { return nil }
func (standalone) close()                                                  {}
func (standalone) firstFailure(context.Context, int, int, int, time.Time, time.Duration) (string, error) {
	return "", nil
}
func (standalone) exchangeFlight(_ context.Context, _ assignment, local []flight.Dump, _ bool) ([]flight.Dump, error) {
	return local, nil
}

// aloneWatch watches no other node.
type aloneWatch struct{}

func (aloneWatch) tick(context.Context) (string, error)   { return "", nil }
func (aloneWatch) finish(context.Context) (string, error) { return "", nil }
func (aloneWatch) admitting(context.Context) (int, error) { return 0, nil }
func (aloneWatch) decided(context.Context) (int, error)   { return 0, nil }
