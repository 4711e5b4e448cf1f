package launch

// The rendezvous as the agents run it over the store: each reads the
// job's state (rdzvstate.go), applies a transition and writes it back by
// compare-and-set, until its round is met.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/xladdp/xladdp/ddp/store"
	"github.com/xladdp/xladdp/internal/quote"
)

// rdzvPoll is how often an agent waiting in the rendezvous reads the
// state again.
const rdzvPoll = 50 * time.Millisecond

// stateKey is the store key of the job's rendezvous state.
func (r *rendezvous) stateKey() string { return fmt.Sprintf("ddprun/%s/rendezvous", r.cfg.RdzvID) }

// update applies change to the job's rendezvous state by compare-and-set,
// again on the value another agent wrote meanwhile, and returns the state
// it left. An unchanged state is written back as it was: a read in one
// call.
func (r *rendezvous) update(ctx context.Context, change func(rdzvState) rdzvState) (rdzvState, error) {
	r.seenMu.Lock()
	seen := r.seen
	r.seenMu.Unlock()
	for {
		s, err := r.decode(seen)
		if err != nil {
			return rdzvState{}, err
		}
		next := change(s)
		want, err := json.Marshal(next)
		if err != nil {
			return rdzvState{}, fmt.Errorf("the rendezvous state: %w", err)
		}
		got, err := r.client.CompareSet(ctx, r.stateKey(), seen, want)
		if err != nil {
			return rdzvState{}, fmt.Errorf("the rendezvous store at %s: %w", r.addr, err)
		}
		if bytes.Equal(got, want) {
			r.seenMu.Lock()
			r.seen = got
			r.seenMu.Unlock()
			return next, nil
		}
		// Another agent wrote first: try again on its value. (A random
		// pause before trying again made 64 agents joining at once
		// slower, not faster.)
		seen = got
	}
}

// read is the job's rendezvous state now.
func (r *rendezvous) read(ctx context.Context) (rdzvState, error) {
	return r.update(ctx, func(s rdzvState) rdzvState { return s })
}

// decode reads a state as stored; none yet is round 0, empty.
func (r *rendezvous) decode(raw []byte) (rdzvState, error) {
	var s rdzvState
	if len(raw) == 0 {
		return s, nil
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return s, fmt.Errorf("the rendezvous store at %s holds %s under %s, not ddprun's state (%w): does another program use --rdzv_id=%s?",
			r.addr, quote.Bytes(raw), r.stateKey(), err, r.cfg.RdzvID)
	}
	return s, nil
}

// join meets round (or the job's later round, for a node behind it):
// node ranks, the node count, every node's workers and the workers'
// store. Node 0 closes the round and chooses that store (lead).
func (r *rendezvous) join(ctx context.Context, round int) (assignment, error) {
	if err := r.storeBack(ctx); err != nil {
		return assignment{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.RdzvTimeout)
	defer cancel()
	stopReport := r.cfg.reportWaiting(r.say, func() string { return r.waitingFor(ctx) })
	defer stopReport()
	clock := &leaderClock{joinBy: time.Now().Add(r.cfg.JoinTimeout)}
	var lw leaderWatch
	for {
		s, closedIt, err := r.joinOnce(ctx, round)
		if err != nil {
			return assignment{}, fmt.Errorf("rendezvous: joining round %d: %w", round, err)
		}
		round = s.Round
		if s.Conflict != "" {
			return assignment{}, errors.New("rendezvous: " + s.Conflict)
		}
		if a, ok := s.assignment(r.me); ok {
			return a, nil
		}
		i := s.index(r.me)
		if i < 0 {
			stopReport()
			return r.late(ctx, s)
		}
		if closedIt {
			if err := r.ring(ctx, round, "closed"); err != nil {
				return assignment{}, err
			}
		}
		if dropped, err := r.tend(ctx, s, &lw); err != nil || dropped {
			if err != nil {
				return assignment{}, err
			}
			continue
		}
		leader := s.Nodes[i].Rank == 0
		if leader {
			led, err := r.lead(ctx, s, clock)
			if err != nil {
				return assignment{}, fmt.Errorf("rendezvous: node 0 leading round %d: %w", round, err)
			}
			if led {
				continue
			}
		}
		if err := r.await(ctx, s, leader); err != nil {
			return assignment{}, err
		}
	}
}

// joinOnce applies this node's join to the state (a no-op once in) and
// reports whether its join closed the round.
func (r *rendezvous) joinOnce(ctx context.Context, round int) (s rdzvState, closedIt bool, err error) {
	me := member{ID: r.me, Rank: r.cfg.NodeRank, NProc: r.cfg.NProcPerNode, NNodes: r.cfg.nodesWanted()}
	rules := r.cfg.rules()
	s, err = r.update(ctx, func(s rdzvState) rdzvState {
		next := s.join(max(round, s.Round), me, true, rules)
		closedIt = next.Closed && !s.Closed
		return next
	})
	if why := s.differs(me); err == nil && why != "" {
		err = fmt.Errorf("rendezvous: %s; this node did not join", why)
	}
	return s, closedIt, err
}

// The rendezvous' doorbells, keys that wake the agents waiting for a
// round's next step (node 0 for the round to close, the others for node
// 0 to choose the workers' store) instead of their next look at the
// state; they hold nothing the state does not.

// ring rings round's doorbell bell.
func (r *rendezvous) ring(ctx context.Context, round int, bell string) error {
	if err := r.client.Set(ctx, r.key(round, "rendezvous", bell), []byte("1")); err != nil {
		return fmt.Errorf("rendezvous: round %d: ringing %q at %s: %w", round, bell, r.addr, err)
	}
	return nil
}

// await waits for round s's next step, at most rdzvPoll: its doorbell
// (node 0's, "closed", the others', "met"), or the next look at the
// state. Its error says what the round waited for when the rendezvous
// timeout ended.
func (r *rendezvous) await(ctx context.Context, s rdzvState, leader bool) error {
	bell := "met"
	if leader {
		bell = "closed"
	}
	short, cancel := context.WithTimeout(ctx, rdzvPoll)
	defer cancel()
	err := r.client.Wait(short, r.key(s.Round, "rendezvous", bell))
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("rendezvous: round %d: %s when the rendezvous timeout (%v) ended: %w",
			s.Round, s.awaited(r.cfg), r.cfg.RdzvTimeout, context.Cause(ctx))
	case err == nil || errors.Is(err, store.ErrTimeout) || short.Err() != nil:
		return nil
	}
	return fmt.Errorf("rendezvous: round %d: waiting for the %q doorbell at %s: %w", s.Round, bell, r.addr, err)
}

// leaderClock is node 0's over its round: the join timeout, and the last
// call once the minimum joined.
type leaderClock struct{ joinBy, lastCall time.Time }

// lead is node 0's part, as torchrun's c10d rendezvous: close the round
// at LastCallTimeout after NNodesMin joined (at NNodesMax it closed as
// the last joined), fail it if fewer joined within JoinTimeout, then
// choose the workers' store and ring "met". It reports whether it
// changed the state. (torchrun also fails when JoinTimeout ends during
// the last call; we close with the nodes we have, which are enough.)
func (r *rendezvous) lead(ctx context.Context, s rdzvState, clock *leaderClock) (bool, error) {
	c, now, round := r.cfg, time.Now(), s.Round
	var change func(rdzvState) rdzvState
	switch {
	case s.Closed && s.Master == "":
		master, err := r.masterAddr(ctx)
		if err != nil {
			return false, err
		}
		if _, err := r.update(ctx, func(s rdzvState) rdzvState { return s.meet(round, master) }); err != nil {
			return false, err
		}
		return true, r.ring(ctx, round, "met")
	case s.Closed:
		return false, nil
	case len(s.Nodes) >= c.NNodesMin && s.survivorsJoined():
		// After a loss: the nodes left are all here, no last call.
		change = func(s rdzvState) rdzvState { return s.close(round, c.rules()) }
	case len(s.Nodes) >= c.NNodesMin && clock.lastCall.IsZero():
		clock.lastCall = now.Add(c.LastCallTimeout)
		return false, nil
	case !clock.lastCall.IsZero() && (now.After(clock.lastCall) || now.After(clock.joinBy)):
		change = func(s rdzvState) rdzvState { return s.close(round, c.rules()) }
	case clock.lastCall.IsZero() && now.After(clock.joinBy):
		why := fmt.Sprintf("%d of the %d nodes needed joined within join_timeout (%v); start ddprun on every node, or lower --nnodes",
			len(s.Nodes), c.NNodesMin, c.JoinTimeout)
		change = func(s rdzvState) rdzvState { return s.fail(round, why) }
	default:
		return false, nil
	}
	_, err := r.update(ctx, change)
	return err == nil, err
}

// late is a node that came after round s closed without it: in an
// elastic job it waits to be admitted; otherwise it fails.
func (r *rendezvous) late(ctx context.Context, s rdzvState) (assignment, error) {
	if r.cfg.rules().elastic() {
		return r.joinAtNextRestart(ctx, s.Round, len(s.Nodes))
	}
	who := "this node"
	if r.cfg.rules().static {
		who = fmt.Sprintf("node rank %d", r.cfg.NodeRank)
	}
	return assignment{}, fmt.Errorf("rendezvous: %s arrived after the rendezvous closed with %d nodes", who, len(s.Nodes))
}

// awaited says what round s waits for, naming the static node ranks
// missing.
func (s rdzvState) awaited(c Config) string {
	if s.Closed {
		return fmt.Sprintf("closed with %d nodes, node 0 has not chosen the workers' store", len(s.Nodes))
	}
	joined := fmt.Sprintf("%d of --nnodes=%s nodes joined", len(s.Nodes), c.nodesWanted())
	if !c.rules().static {
		if len(s.Nodes) >= c.NNodesMin {
			joined += fmt.Sprintf(", enough: the last call waits up to last_call_timeout (%v) for more", c.LastCallTimeout)
		}
		return joined
	}
	var missing []int
	for rank := range c.NNodesMax {
		if !slices.ContainsFunc(s.Nodes, func(m member) bool { return m.Rank == rank }) {
			missing = append(missing, rank)
		}
	}
	return fmt.Sprintf("%s (node ranks %v missing)", joined, missing)
}

// waitingFor is the rendezvous' word while it waits: what for, where,
// and this node's rank.
func (r *rendezvous) waitingFor(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	s, err := r.read(ctx)
	if err != nil {
		return fmt.Sprintf("cannot read the rendezvous at %s: %v", r.addr, err)
	}
	me := "this node has not joined yet"
	if i := s.index(r.me); i >= 0 {
		me = fmt.Sprintf("this is node %d", s.Nodes[i].Rank)
	}
	return fmt.Sprintf("%s at %s (%s)", s.awaited(r.cfg), r.addr, me)
}
