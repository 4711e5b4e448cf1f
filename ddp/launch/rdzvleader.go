package launch

// A c10d round is led by its first node (node 0 by arrival): it closes
// the round and chooses the workers' store. When that node's agent dies
// or leaves while the round meets (kill -9 during a restart, SIGTERM),
// nobody else would, and every other node would wait for the whole
// rendezvous timeout. So every node joining a round beats a key of its
// own, and the others drop a leader whose beat stood still for
// heartbeatTimeout: the next node leads.

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// joiningBeat is how often a node waiting in a round beats, and how often
// the others look at their leader's beat.
const joiningBeat = 500 * time.Millisecond

// leaderWatch is a node's watch over its round's leader while it joins.
type leaderWatch struct {
	beats     int
	lastBeat  time.Time
	leader    string    // the leader watched
	seen      string    // its beat as last read
	since     time.Time // when seen was first read
	lastCheck time.Time
}

// tend beats this node's key in round s and, on a node other than the
// leader, drops a leader whose beat has stood still for
// heartbeatTimeout; it reports whether it dropped one.
func (r *rendezvous) tend(ctx context.Context, s rdzvState, w *leaderWatch) (bool, error) {
	if r.cfg.rules().static || len(s.Nodes) == 0 || s.Master != "" {
		return false, nil
	}
	now := time.Now()
	if now.Sub(w.lastBeat) >= joiningBeat {
		w.beats++
		w.lastBeat = now
		if err := r.client.Set(ctx, r.key(s.Round, "joining", r.me), []byte(strconv.Itoa(w.beats))); err != nil {
			return false, fmt.Errorf("rendezvous: round %d: beating at %s: %w", s.Round, r.addr, err)
		}
	}
	leader := s.Nodes[0].ID
	if leader == r.me || now.Sub(w.lastCheck) < joiningBeat {
		return false, nil
	}
	w.lastCheck = now
	beat, err := r.joiningBeatOf(ctx, s.Round, leader)
	if err != nil {
		return false, err
	}
	if leader != w.leader || beat != w.seen {
		w.leader, w.seen, w.since = leader, beat, now
		return false, nil
	}
	if now.Sub(w.since) < heartbeatTimeout {
		return false, nil
	}
	if _, err := r.update(ctx, func(s rdzvState) rdzvState { return s.drop(s.Round, leader) }); err != nil {
		return false, err
	}
	r.say("ddprun: rendezvous: round %d's first node, %s, beat no heartbeat for %v while the round met (its agent died or left): "+
		"it leaves the round, and the next node leads", s.Round, leader, heartbeatTimeout)
	w.leader = ""
	return true, nil
}

// joiningBeatOf is node id's beat in round, "" before its first.
func (r *rendezvous) joiningBeatOf(ctx context.Context, round int, id string) (string, error) {
	key := r.key(round, "joining", id)
	have, err := r.client.Check(ctx, key)
	if err != nil || !have[0] {
		return "", err
	}
	b, err := r.client.Get(ctx, key)
	return string(b), err
}
