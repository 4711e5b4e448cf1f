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
// attempt: alone (standalone, a single node with no rendezvous endpoint)
// or through the rendezvous store (*rendezvous: static or c10d).
type meeting interface {
	// join decides attempt's ranks: this node's, the node count, the
	// workers' store.
	join(ctx context.Context, attempt int) (assignment, error)
	// watch is attempt's watch over the other nodes.
	watch(attempt int, a assignment) nodeWatch
	// fail posts this node's failure of attempt, seen at seen.
	fail(ctx context.Context, attempt, node int, why string, seen time.Time)
	// firstFailure names the earliest failure another node posted before
	// mine (waiting at most wait for one), or "".
	firstFailure(ctx context.Context, attempt, node, nnodes int, mine time.Time, wait time.Duration) string
	// exchangeFlight posts this node's flight records for the others and,
	// when gather, returns every node's.
	exchangeFlight(ctx context.Context, attempt int, a assignment, local []flight.Dump, gather bool) []flight.Dump
	close()
}

// nodeWatch is one attempt's watch over the other nodes.
type nodeWatch interface {
	// tick beats this node's heartbeat and returns why the attempt must
	// end (another node's failure or loss), or "".
	tick(ctx context.Context) string
	// finish marks this node's workers done and waits as the meeting
	// needs (the store's host, for the others still using it).
	finish(ctx context.Context) error
	// admitting reports whether the round ends to admit nodes waiting
	// to join an elastic job, and how many (deciding it on node 0).
	admitting(ctx context.Context) (int, bool)
	// decided reports whether the round already ends to admit them.
	decided(ctx context.Context) (int, bool)
}

// standalone is a single node's meeting: it decides alone, and nobody
// else fails or needs its records.
type standalone struct{ cfg Config }

// join picks the workers' store: --master_addr and --master_port, or a
// free port when none was given, so jobs on one machine never collide.
func (s standalone) join(_ context.Context, attempt int) (assignment, error) {
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
	return assignment{round: attempt, node: 0, nnodes: 1, world: c.NProcPerNode, master: net.JoinHostPort(host, strconv.Itoa(port))}, nil
}

func (standalone) watch(int, assignment) nodeWatch                   { return aloneWatch{} }
func (standalone) fail(context.Context, int, int, string, time.Time) {}
func (standalone) close()                                            {}
func (standalone) firstFailure(context.Context, int, int, int, time.Time, time.Duration) string {
	return ""
}
func (standalone) exchangeFlight(_ context.Context, _ int, _ assignment, local []flight.Dump, _ bool) []flight.Dump {
	return local
}

// aloneWatch watches no other node.
type aloneWatch struct{}

func (aloneWatch) tick(context.Context) string           { return "" }
func (aloneWatch) finish(context.Context) error          { return nil }
func (aloneWatch) admitting(context.Context) (int, bool) { return 0, false }
func (aloneWatch) decided(context.Context) (int, bool)   { return 0, false }
