package launch

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestRendezvousStateTransitions: each pure transition of the job's
// rendezvous state, from a given state, with no store and no process.
func TestRendezvousStateTransitions(t *testing.T) {
	c10d := rdzvRules{min: 1, max: 3}
	pair := rdzvRules{min: 2, max: 2}
	static := rdzvRules{static: true, min: 2, max: 2}
	a, b, c := member{ID: "a", Rank: -1, NProc: 2}, member{ID: "b", Rank: -1, NProc: 4}, member{ID: "c", Rank: -1, NProc: 1}
	at := func(m member, rank int) member { m.Rank = rank; return m }
	closed := rdzvState{Round: 3, Nodes: []member{at(a, 0), at(b, 1)}, Closed: true, Master: "h:1"}
	cases := []struct {
		name   string
		from   rdzvState
		change func(rdzvState) rdzvState
		want   rdzvState
	}{
		{"the first node opens round 0", rdzvState{}, func(s rdzvState) rdzvState { return s.join(0, a, true, c10d) },
			rdzvState{Nodes: []member{at(a, 0)}}},
		{"c10d ranks by arrival", rdzvState{Nodes: []member{at(a, 0)}}, func(s rdzvState) rdzvState { return s.join(0, b, true, c10d) },
			rdzvState{Nodes: []member{at(a, 0), at(b, 1)}}},
		{"joining twice changes nothing", rdzvState{Nodes: []member{at(a, 0)}}, func(s rdzvState) rdzvState { return s.join(0, a, true, c10d) },
			rdzvState{Nodes: []member{at(a, 0)}}},
		{"the largest count closes", rdzvState{Nodes: []member{at(a, 0)}}, func(s rdzvState) rdzvState { return s.join(0, b, true, pair) },
			rdzvState{Nodes: []member{at(a, 0), at(b, 1)}, Closed: true}},
		{"a late node is not added", closed, func(s rdzvState) rdzvState { return s.join(3, c, true, c10d) }, closed},
		{"a restart opens the next round, keeping the admission",
			rdzvState{Round: 3, Nodes: closed.Nodes, Closed: true, Waiting: []string{"c"}, Admitted: admission{Round: 3, Nodes: 1}},
			func(s rdzvState) rdzvState { return s.join(4, b, true, c10d) },
			rdzvState{Round: 4, Nodes: []member{at(b, 0)}, Admitted: admission{Round: 3, Nodes: 1}}},
		{"a waiting node never opens a round", closed, func(s rdzvState) rdzvState { return s.join(4, c, false, c10d) }, closed},
		{"a node behind joins nothing of an older round", rdzvState{Round: 4}, func(s rdzvState) rdzvState { return s.join(3, a, true, c10d) },
			rdzvState{Round: 4}},
		{"static keeps --node_rank", rdzvState{}, func(s rdzvState) rdzvState { return s.join(0, at(b, 1), true, static) },
			rdzvState{Nodes: []member{at(b, 1)}}},
		{"static rank taken twice", rdzvState{Nodes: []member{at(a, 0)}}, func(s rdzvState) rdzvState { return s.join(0, at(b, 0), true, static) },
			rdzvState{Nodes: []member{at(a, 0)}, Conflict: "node rank 0 claimed by two nodes: a and b (give each node its own --node_rank)"}},
		{"static rank beyond --nnodes", rdzvState{}, func(s rdzvState) rdzvState { return s.join(0, at(a, 5), true, static) },
			rdzvState{Conflict: "node rank 5 with --nnodes=2 (ranks run from 0 to 1)"}},
		{"static without a rank", rdzvState{}, func(s rdzvState) rdzvState { return s.join(0, a, true, static) },
			rdzvState{Conflict: "a node joined without --node_rank under the static rendezvous (give every node its --node_rank, or use --rdzv_backend=c10d)"}},
		{"no join after a conflict", rdzvState{Conflict: "x"}, func(s rdzvState) rdzvState { return s.join(0, a, true, c10d) },
			rdzvState{Conflict: "x"}},
		{"the last call closes with the minimum", rdzvState{Nodes: []member{at(a, 0)}}, func(s rdzvState) rdzvState { return s.close(0, c10d) },
			rdzvState{Nodes: []member{at(a, 0)}, Closed: true}},
		{"no close below the minimum", rdzvState{Nodes: []member{at(a, 0)}}, func(s rdzvState) rdzvState { return s.close(0, pair) },
			rdzvState{Nodes: []member{at(a, 0)}}},
		{"static closes only on ranks 0..n-1", rdzvState{Nodes: []member{at(a, 0), at(b, 2)}},
			func(s rdzvState) rdzvState { return s.close(0, rdzvRules{static: true, min: 2, max: 3}) },
			rdzvState{Nodes: []member{at(a, 0), at(b, 2)}, Conflict: "node rank 1 never joined, and 2 nodes did: give the nodes ranks 0 to 1"}},
		{"the first conflict stays", rdzvState{Conflict: "first"}, func(s rdzvState) rdzvState { return s.fail(0, "second") },
			rdzvState{Conflict: "first"}},
		{"a conflict of another round is none", rdzvState{Round: 1}, func(s rdzvState) rdzvState { return s.fail(0, "old") },
			rdzvState{Round: 1}},
		{"node 0 sets the workers' store once closed", rdzvState{Nodes: []member{at(a, 0)}, Closed: true},
			func(s rdzvState) rdzvState { return s.meet(0, "h:1") }, rdzvState{Nodes: []member{at(a, 0)}, Closed: true, Master: "h:1"}},
		{"not before", rdzvState{Nodes: []member{at(a, 0)}}, func(s rdzvState) rdzvState { return s.meet(0, "h:1") },
			rdzvState{Nodes: []member{at(a, 0)}}},
		{"a late node waits", closed, func(s rdzvState) rdzvState { return s.wait(3, "c") },
			rdzvState{Round: 3, Nodes: closed.Nodes, Closed: true, Master: "h:1", Waiting: []string{"c"}}},
		{"a member does not wait", closed, func(s rdzvState) rdzvState { return s.wait(3, "a") }, closed},
		{"node 0 admits the waiting nodes", rdzvState{Round: 3, Nodes: closed.Nodes, Closed: true, Waiting: []string{"c"}},
			func(s rdzvState) rdzvState { return s.admit(3, c10d) },
			rdzvState{Round: 3, Nodes: closed.Nodes, Closed: true, Waiting: []string{"c"}, Admitted: admission{Round: 3, Nodes: 1}}},
		{"no admission at the largest size", rdzvState{Round: 3, Nodes: closed.Nodes, Closed: true, Waiting: []string{"c"}},
			func(s rdzvState) rdzvState { return s.admit(3, pair) },
			rdzvState{Round: 3, Nodes: closed.Nodes, Closed: true, Waiting: []string{"c"}}},
		{"no admission with nobody waiting", closed, func(s rdzvState) rdzvState { return s.admit(3, c10d) }, closed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.from
			before.Nodes = append([]member(nil), tc.from.Nodes...)
			assert.Equal(t, tc.want, tc.change(tc.from))
			assert.Equal(t, before.Nodes, tc.from.Nodes, "a transition changed the state it was given")
		})
	}
}

// TestRendezvousStateAnswers: what agents read off the state: their
// assignment once the round is met, and an admission decided.
func TestRendezvousStateAnswers(t *testing.T) {
	met := rdzvState{Round: 2, Nodes: []member{{ID: "b", Rank: 1, NProc: 4}, {ID: "a", Rank: 0, NProc: 2}}, Closed: true, Master: "h:1",
		Admitted: admission{Round: 2, Nodes: 1}}
	cases := []struct {
		name     string
		s        rdzvState
		id       string
		want     assignment
		ok       bool
		admitted int
	}{
		{"node 1 after node 0's workers", met, "b", assignment{round: 2, node: 1, nnodes: 2, offset: 2, world: 6, master: "h:1"}, true, 1},
		{"node 0", met, "a", assignment{round: 2, node: 0, nnodes: 2, offset: 0, world: 6, master: "h:1"}, true, 1},
		{"not a member", met, "c", assignment{}, false, 1},
		{"no workers' store yet", rdzvState{Round: 2, Nodes: met.Nodes, Closed: true}, "a", assignment{}, false, 0},
		{"an admission of an earlier round", rdzvState{Round: 3, Admitted: admission{Round: 2, Nodes: 1}}, "a", assignment{}, false, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, ok := tc.s.assignment(tc.id)
			assert.Equal(t, tc.ok, ok)
			assert.Equal(t, tc.want, a)
			assert.Equal(t, tc.admitted, tc.s.decided(tc.s.Round))
		})
	}
}
