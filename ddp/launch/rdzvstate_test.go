package launch

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// transition is a transition of the rendezvous state from a given state
// and the state it must leave.
type transition struct {
	name   string
	from   rdzvState
	change func(rdzvState) rdzvState
	want   rdzvState
}

// checkTransitions applies each case's transition, which must leave the
// state wanted and the state it was given as it was (it is pure).
func checkTransitions(t *testing.T, cases []transition) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.from
			before.Nodes = append([]member(nil), tc.from.Nodes...)
			assert.Equal(t, tc.want, tc.change(tc.from))
			assert.Equal(t, before.Nodes, tc.from.Nodes, "a transition changed the state it was given")
		})
	}
}

// Nodes a, b and c of the tests, and the rules they join under.
var (
	nodeA, nodeB, nodeC = member{ID: "a", Rank: -1, NProc: 2}, member{ID: "b", Rank: -1, NProc: 4}, member{ID: "c", Rank: -1, NProc: 1}
	c10dRules           = rdzvRules{min: 1, max: 3}
	pairRules           = rdzvRules{min: 2, max: 2}
	staticRules         = rdzvRules{static: true, min: 2, max: 2}
	// metRound is round 3 met by a and b.
	metRound = rdzvState{Round: 3, Nodes: []member{at(nodeA, 0), at(nodeB, 1)}, Closed: true, Master: "h:1"}
)

// at is m with node rank rank.
func at(m member, rank int) member { m.Rank = rank; return m }

// TestRendezvousJoins: the join transition, with no store and no
// process: ranks, a late node, a round opened, the static conflicts.
func TestRendezvousJoins(t *testing.T) {
	checkTransitions(t, []transition{
		{"the first node opens round 0", rdzvState{}, func(s rdzvState) rdzvState { return s.join(0, nodeA, true, c10dRules) },
			rdzvState{Nodes: []member{at(nodeA, 0)}}},
		{"c10d ranks by arrival", rdzvState{Nodes: []member{at(nodeA, 0)}}, func(s rdzvState) rdzvState { return s.join(0, nodeB, true, c10dRules) },
			rdzvState{Nodes: []member{at(nodeA, 0), at(nodeB, 1)}}},
		{"joining twice changes nothing", rdzvState{Nodes: []member{at(nodeA, 0)}}, func(s rdzvState) rdzvState { return s.join(0, nodeA, true, c10dRules) },
			rdzvState{Nodes: []member{at(nodeA, 0)}}},
		{"the largest count closes", rdzvState{Nodes: []member{at(nodeA, 0)}}, func(s rdzvState) rdzvState { return s.join(0, nodeB, true, pairRules) },
			rdzvState{Nodes: []member{at(nodeA, 0), at(nodeB, 1)}, Closed: true}},
		{"a late node is not added", metRound, func(s rdzvState) rdzvState { return s.join(3, nodeC, true, c10dRules) }, metRound},
		{"a restart opens the next round, keeping the admission",
			rdzvState{Round: 3, Nodes: metRound.Nodes, Closed: true, Waiting: []string{"c"}, Admitted: admission{Round: 3, Nodes: 1}},
			func(s rdzvState) rdzvState { return s.join(4, nodeB, true, c10dRules) },
			rdzvState{Round: 4, Nodes: []member{at(nodeB, 0)}, Admitted: admission{Round: 3, Nodes: 1}}},
		{"a waiting node never opens a round", metRound, func(s rdzvState) rdzvState { return s.join(4, nodeC, false, c10dRules) }, metRound},
		{"a node behind joins nothing of an older round", rdzvState{Round: 4}, func(s rdzvState) rdzvState { return s.join(3, nodeA, true, c10dRules) },
			rdzvState{Round: 4}},
		{"static keeps --node_rank", rdzvState{}, func(s rdzvState) rdzvState { return s.join(0, at(nodeB, 1), true, staticRules) },
			rdzvState{Nodes: []member{at(nodeB, 1)}}},
		{"static rank taken twice", rdzvState{Nodes: []member{at(nodeA, 0)}}, func(s rdzvState) rdzvState { return s.join(0, at(nodeB, 0), true, staticRules) },
			rdzvState{Nodes: []member{at(nodeA, 0)}, Conflict: "node rank 0 claimed by two nodes: a and b (give each node its own --node_rank)"}},
		{"static rank beyond --nnodes", rdzvState{}, func(s rdzvState) rdzvState { return s.join(0, at(nodeA, 5), true, staticRules) },
			rdzvState{Conflict: "node rank 5 with --nnodes=2 (ranks run from 0 to 1)"}},
		{"static without a rank", rdzvState{}, func(s rdzvState) rdzvState { return s.join(0, nodeA, true, staticRules) },
			rdzvState{Conflict: "a node joined without --node_rank under the static rendezvous (give every node its --node_rank, or use --rdzv_backend=c10d)"}},
		{"no join after a conflict", rdzvState{Conflict: "x"}, func(s rdzvState) rdzvState { return s.join(0, nodeA, true, c10dRules) },
			rdzvState{Conflict: "x"}},
	})
}

// TestRendezvousStateTransitions: the other transitions (close, fail,
// meet, wait, admit), with no store and no process.
func TestRendezvousStateTransitions(t *testing.T) {
	checkTransitions(t, []transition{
		{"the last call closes with the minimum", rdzvState{Nodes: []member{at(nodeA, 0)}}, func(s rdzvState) rdzvState { return s.close(0, c10dRules) },
			rdzvState{Nodes: []member{at(nodeA, 0)}, Closed: true}},
		{"no close below the minimum", rdzvState{Nodes: []member{at(nodeA, 0)}}, func(s rdzvState) rdzvState { return s.close(0, pairRules) },
			rdzvState{Nodes: []member{at(nodeA, 0)}}},
		{"static closes only on ranks 0..n-1", rdzvState{Nodes: []member{at(nodeA, 0), at(nodeB, 2)}},
			func(s rdzvState) rdzvState { return s.close(0, rdzvRules{static: true, min: 2, max: 3}) },
			rdzvState{Nodes: []member{at(nodeA, 0), at(nodeB, 2)}, Conflict: "node rank 1 never joined, and 2 nodes did: give the nodes ranks 0 to 1"}},
		{"the first conflict stays", rdzvState{Conflict: "first"}, func(s rdzvState) rdzvState { return s.fail(0, "second") },
			rdzvState{Conflict: "first"}},
		{"a conflict of another round is none", rdzvState{Round: 1}, func(s rdzvState) rdzvState { return s.fail(0, "old") },
			rdzvState{Round: 1}},
		{"node 0 sets the workers' store once closed", rdzvState{Nodes: []member{at(nodeA, 0)}, Closed: true},
			func(s rdzvState) rdzvState { return s.meet(0, "h:1") }, rdzvState{Nodes: []member{at(nodeA, 0)}, Closed: true, Master: "h:1"}},
		{"not before", rdzvState{Nodes: []member{at(nodeA, 0)}}, func(s rdzvState) rdzvState { return s.meet(0, "h:1") },
			rdzvState{Nodes: []member{at(nodeA, 0)}}},
		{"a late node waits", metRound, func(s rdzvState) rdzvState { return s.wait(3, "c") },
			rdzvState{Round: 3, Nodes: metRound.Nodes, Closed: true, Master: "h:1", Waiting: []string{"c"}}},
		{"a member does not wait", metRound, func(s rdzvState) rdzvState { return s.wait(3, "a") }, metRound},
		{"node 0 admits the waiting nodes", rdzvState{Round: 3, Nodes: metRound.Nodes, Closed: true, Waiting: []string{"c"}},
			func(s rdzvState) rdzvState { return s.admit(3, c10dRules) },
			rdzvState{Round: 3, Nodes: metRound.Nodes, Closed: true, Waiting: []string{"c"}, Admitted: admission{Round: 3, Nodes: 1}}},
		{"no admission at the largest size", rdzvState{Round: 3, Nodes: metRound.Nodes, Closed: true, Waiting: []string{"c"}},
			func(s rdzvState) rdzvState { return s.admit(3, pairRules) },
			rdzvState{Round: 3, Nodes: metRound.Nodes, Closed: true, Waiting: []string{"c"}}},
		{"no admission with nobody waiting", metRound, func(s rdzvState) rdzvState { return s.admit(3, c10dRules) }, metRound},
	})
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
		{"node 1 after node 0's workers", met, "b", assignment{round: 2, node: 1, nnodes: 2, offset: 2, world: 6, master: "h:1", agents: map[int]string{0: "a", 1: "b"}}, true, 1},
		{"node 0", met, "a", assignment{round: 2, node: 0, nnodes: 2, offset: 0, world: 6, master: "h:1", agents: map[int]string{0: "a", 1: "b"}}, true, 1},
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

// TestRendezvousRemembersTheLost: a node found lost is recorded for its
// round; the next round expects the others and knows when they all
// joined; a node that is not the round's, or a stale round, changes
// nothing.
func TestRendezvousRemembersTheLost(t *testing.T) {
	three := rdzvState{Round: 3, Nodes: []member{at(nodeA, 0), at(nodeB, 1), at(nodeC, 2)}, Closed: true, Master: "h:1"}
	lostC := three
	lostC.Lost = []string{"c"}
	checkTransitions(t, []transition{
		{"a lost node is recorded", three, func(s rdzvState) rdzvState { return s.lose(3, "c") }, lostC},
		{"twice is once", lostC, func(s rdzvState) rdzvState { return s.lose(3, "c") }, lostC},
		{"a node not in the round is not", three, func(s rdzvState) rdzvState { return s.lose(3, "z") }, three},
		{"a stale round's loss is not", three, func(s rdzvState) rdzvState { return s.lose(2, "c") }, three},
		{"the next round expects the survivors", lostC, func(s rdzvState) rdzvState { return s.join(4, nodeB, true, c10dRules) },
			rdzvState{Round: 4, Nodes: []member{at(nodeB, 0)}, Expected: []string{"a", "b"}}},
		{"a round after no loss expects nobody", three, func(s rdzvState) rdzvState { return s.join(4, nodeB, true, c10dRules) },
			rdzvState{Round: 4, Nodes: []member{at(nodeB, 0)}}},
	})
	next := lostC.join(4, nodeB, true, c10dRules)
	assert.False(t, next.survivorsJoined(), "a is not here yet")
	next = next.join(4, nodeA, true, c10dRules)
	assert.True(t, next.survivorsJoined(), "a and b are")
	assert.False(t, three.open(4).join(4, nodeA, true, c10dRules).survivorsJoined(), "no loss: the last call decides")
}

// TestRendezvousRefusesAnotherNNodes: a node given another --nnodes than
// the nodes of the round is not added (its agent fails alone, saying so:
// joinOnce), and the round goes on.
func TestRendezvousRefusesAnotherNNodes(t *testing.T) {
	a, c := nodeA, nodeC
	a.NNodes, c.NNodes = "2:3", "3"
	in := rdzvState{Nodes: []member{at(a, 0)}}
	checkTransitions(t, []transition{
		{"another --nnodes is not added", in, func(s rdzvState) rdzvState { return s.join(0, c, true, c10dRules) }, in},
	})
	assert.Equal(t, `node a was started with --nnodes=2:3 and node c with --nnodes=3: give every node the same --nnodes`, in.differs(c))
	assert.Empty(t, in.differs(a))
}

// TestRdzvDropsALeaderThatLeft: a round's first node whose agent died or
// left while the round met is taken out: the next node leads (the c10d
// ranks move up), a round closed but not met opens again, and a round
// expected after a loss no longer waits for it; a met round, another
// round's, or a node not in it are left as they are.
func TestRdzvDropsALeaderThatLeft(t *testing.T) {
	three := rdzvState{Round: 4, Nodes: []member{at(nodeA, 0), at(nodeB, 1), at(nodeC, 2)}, Closed: true,
		Expected: []string{"a", "b", "c"}}
	checkTransitions(t, []transition{
		{"the leader of a closed round", three, func(s rdzvState) rdzvState { return s.drop(4, "a") },
			rdzvState{Round: 4, Nodes: []member{at(nodeB, 0), at(nodeC, 1)}, Expected: []string{"b", "c"}}},
		{"a node in the middle", three, func(s rdzvState) rdzvState { return s.drop(4, "b") },
			rdzvState{Round: 4, Nodes: []member{at(nodeA, 0), at(nodeC, 1)}, Expected: []string{"a", "c"}}},
		{"a met round", metRound, func(s rdzvState) rdzvState { return s.drop(3, "a") }, metRound},
		{"another round", three, func(s rdzvState) rdzvState { return s.drop(5, "a") }, three},
		{"a node not in it", three, func(s rdzvState) rdzvState { return s.drop(4, "z") }, three},
	})
}
