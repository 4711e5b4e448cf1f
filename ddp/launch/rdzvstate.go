package launch

// The rendezvous and admission state of a job as one value, as torch's
// _RendezvousState (elastic/rendezvous/dynamic_rendezvous.py): every
// agent reads it, applies one of the pure transitions below and writes
// it back by compare-and-set (rendezvous.update). The running round's
// heartbeats, failures and flight records stay in keys of their own
// (watch.go): every agent writes them every tick, which on one value
// would make the agents retry each other's writes.

import (
	"fmt"
	"slices"

	"github.com/xladdp/xladdp/internal/quote"
)

// rdzvState is the job's rendezvous: the round being met or run, its
// nodes, whether it closed, where the workers meet, and the nodes
// waiting to join a running elastic job.
type rdzvState struct {
	Round int `json:"round"`
	// Nodes joined Round, in the order they came.
	Nodes []member `json:"nodes,omitempty"`
	// Closed: no node joins Round any more.
	Closed bool `json:"closed,omitempty"`
	// Master is where worker rank 0 hosts the workers' store, chosen by
	// node 0 once the round closed: the round is met when it is set.
	Master string `json:"master,omitempty"`
	// Conflict is why Round cannot meet: every agent fails with it.
	Conflict string `json:"conflict,omitempty"`
	// Waiting are the nodes (their ids) that came after Round closed and
	// wait to join at the next round.
	Waiting []string `json:"waiting,omitempty"`
	// Admitted is the last round node 0 ended to admit waiting nodes. It
	// outlives that round: a node still reading why its round ended may
	// ask after another already opened the next.
	Admitted admission `json:"admitted,omitzero"`
	// Lost are the nodes of Round found lost while it ran (their agent's
	// heartbeat stopped). Expected are the nodes of the round before
	// that were not: the round closes as soon as they all joined, since
	// the lost ones do not come back (else the last call waits for them).
	Lost     []string `json:"lost,omitempty"`
	Expected []string `json:"expected,omitempty"`
}

// member is a node of a round.
type member struct {
	ID    string `json:"id"`    // the agent's identity (nodeID)
	Rank  int    `json:"rank"`  // its node rank: --node_rank (static) or its arrival (c10d)
	NProc int    `json:"nproc"` // its workers
	// NNodes is the --nnodes it was given ("2:3"): every node of a job
	// must give the same, or a loss leaves them waiting for different
	// counts.
	NNodes string `json:"nnodes,omitempty"`
}

// admission is a round ended to admit Nodes waiting nodes.
type admission struct {
	Round int `json:"round"`
	Nodes int `json:"nodes"`
}

// rdzvRules are the job's settings the transitions follow.
type rdzvRules struct {
	static   bool // node ranks are --node_rank, not the order of arrival
	min, max int  // --nnodes=MIN:MAX
}

// elastic: nodes may join a running job.
func (r rdzvRules) elastic() bool { return !r.static && r.min < r.max }

// rules are c's.
func (c Config) rules() rdzvRules {
	return rdzvRules{static: c.RdzvBackend != "c10d", min: c.NNodesMin, max: c.NNodesMax}
}

// open starts round, unless s is at it or past it: the first node to
// join after a restart opens the next round, keeping the last admission.
func (s rdzvState) open(round int) rdzvState {
	if s.Round >= round {
		return s
	}
	next := rdzvState{Round: round, Admitted: s.Admitted}
	if len(s.Lost) > 0 {
		for _, m := range s.Nodes {
			if !slices.Contains(s.Lost, m.ID) {
				next.Expected = append(next.Expected, m.ID)
			}
		}
	}
	return next
}

// lose records ids among round's nodes found lost.
func (s rdzvState) lose(round int, ids ...string) rdzvState {
	if s.Round != round {
		return s
	}
	for _, id := range ids {
		if s.index(id) >= 0 && !slices.Contains(s.Lost, id) {
			s.Lost = append(slices.Clone(s.Lost), id)
		}
	}
	return s
}

// drop takes id out of round before its workers met (its agent died or
// left while it joined): the c10d ranks after it move up, so that the
// next node leads, and a round closed but not met opens again.
func (s rdzvState) drop(round int, id string) rdzvState {
	i := s.index(id)
	if s.Round != round || i < 0 || s.Master != "" || s.Conflict != "" {
		return s
	}
	nodes := slices.Delete(slices.Clone(s.Nodes), i, i+1)
	for k := range nodes {
		nodes[k].Rank = k
	}
	s.Nodes, s.Closed = nodes, false
	s.Expected = slices.DeleteFunc(slices.Clone(s.Expected), func(e string) bool { return e == id })
	return s
}

// survivorsJoined reports whether round s opened after a loss and every
// node expected (the last round's, but the lost) joined it.
func (s rdzvState) survivorsJoined() bool {
	if len(s.Expected) == 0 {
		return false
	}
	for _, id := range s.Expected {
		if s.index(id) < 0 {
			return false
		}
	}
	return true
}

// join adds me to round, opening it when opens (a node waiting to be
// admitted never opens one: it would start a second job beside the
// running one). A static node rank taken by another node, or outside
// --nnodes, is a conflict; the round closes at the largest node count.
// A node already in, or late (the round closed), leaves s as it is.
func (s rdzvState) join(round int, me member, opens bool, rules rdzvRules) rdzvState {
	if opens {
		s = s.open(round)
	}
	if s.Round != round || s.Closed || s.Conflict != "" || s.index(me.ID) >= 0 {
		return s
	}
	if s.differs(me) != "" {
		return s // refused, itself alone (joinOnce): the job's nodes go on
	}
	if !rules.static {
		me.Rank = len(s.Nodes)
	} else if why := s.claim(me, rules); why != "" {
		return s.fail(round, why)
	}
	s.Nodes = append(slices.Clone(s.Nodes), me)
	if len(s.Nodes) >= rules.max {
		s = s.close(round, rules)
	}
	return s
}

// differs is why me may not join the nodes of s, given another --nnodes,
// or "".
func (s rdzvState) differs(me member) string {
	for _, m := range s.Nodes {
		if m.NNodes != me.NNodes {
			return fmt.Sprintf("node %s was started with --nnodes=%s and node %s with --nnodes=%s: give every node the same --nnodes",
				quote.Text([]byte(m.ID)), quote.Text([]byte(m.NNodes)), me.ID, me.NNodes)
		}
	}
	return ""
}

// claim is why me may not take its static node rank, or "".
func (s rdzvState) claim(me member, rules rdzvRules) string {
	switch {
	case me.Rank < 0:
		return "a node joined without --node_rank under the static rendezvous (give every node its --node_rank, or use --rdzv_backend=c10d)"
	case me.Rank >= rules.max:
		return fmt.Sprintf("node rank %d with --nnodes=%d (ranks run from 0 to %d)", me.Rank, rules.max, rules.max-1)
	}
	for _, m := range s.Nodes {
		if m.Rank == me.Rank {
			return fmt.Sprintf("node rank %d claimed by two nodes: %s and %s (give each node its own --node_rank)",
				me.Rank, quote.Text([]byte(m.ID)), me.ID)
		}
	}
	return ""
}

// close ends round's joining with the nodes it has, once at least
// --nnodes' minimum joined (node 0 decides when: the last call ended).
// Static node ranks must then run from 0 without a gap.
func (s rdzvState) close(round int, rules rdzvRules) rdzvState {
	if s.Round != round || s.Closed || s.Conflict != "" || len(s.Nodes) < rules.min {
		return s
	}
	for rank := range len(s.Nodes) {
		if !slices.ContainsFunc(s.Nodes, func(m member) bool { return m.Rank == rank }) {
			return s.fail(round, fmt.Sprintf("node rank %d never joined, and %d nodes did: give the nodes ranks 0 to %d",
				rank, len(s.Nodes), len(s.Nodes)-1))
		}
	}
	s.Closed = true
	return s
}

// fail makes why round's conflict, unless it has one: every agent of the
// round fails with the first.
func (s rdzvState) fail(round int, why string) rdzvState {
	if s.Round == round && s.Conflict == "" {
		s.Conflict = why
	}
	return s
}

// meet sets where round's workers meet (node 0's choice), once closed.
func (s rdzvState) meet(round int, master string) rdzvState {
	if s.Round == round && s.Closed && s.Conflict == "" && s.Master == "" {
		s.Master = master
	}
	return s
}

// wait lists id among the nodes waiting to join after round, which
// closed without it.
func (s rdzvState) wait(round int, id string) rdzvState {
	if s.Round != round || !s.Closed || s.index(id) >= 0 || slices.Contains(s.Waiting, id) {
		return s
	}
	s.Waiting = append(slices.Clone(s.Waiting), id)
	return s
}

// admit ends round to admit the nodes waiting, when there are some and
// the job runs below its largest size (node 0 decides it for every
// agent).
func (s rdzvState) admit(round int, rules rdzvRules) rdzvState {
	if s.Round != round || !s.Closed || len(s.Waiting) == 0 || len(s.Nodes) >= rules.max || s.decided(round) > 0 {
		return s
	}
	s.Admitted = admission{Round: round, Nodes: len(s.Waiting)}
	return s
}

// decided is how many waiting nodes round ended to admit (0: none).
func (s rdzvState) decided(round int) int {
	if s.Admitted.Round != round {
		return 0
	}
	return s.Admitted.Nodes
}

// index is id's place in the round's nodes, or -1.
func (s rdzvState) index(id string) int {
	return slices.IndexFunc(s.Nodes, func(m member) bool { return m.ID == id })
}

// assignment is what the met round decides for node id: its node rank,
// the node count, its workers' first global rank and the world.
func (s rdzvState) assignment(id string) (assignment, bool) {
	i := s.index(id)
	if i < 0 || !s.Closed || s.Master == "" || s.Conflict != "" {
		return assignment{}, false
	}
	me := s.Nodes[i]
	a := assignment{round: s.Round, node: me.Rank, nnodes: len(s.Nodes), master: s.Master, agents: map[int]string{}}
	for _, m := range s.Nodes {
		a.agents[m.Rank] = m.ID
		if m.Rank < me.Rank {
			a.offset += m.NProc
		}
		a.world += m.NProc
	}
	return a, true
}
