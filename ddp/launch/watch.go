package launch

// The running job's watch over the other nodes: heartbeats, failures
// posted through the rendezvous store, the first failure among them, and
// the end of a round.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/xladdp/xladdp/internal/quote"
)

// watch is one monitor tick's check of the other nodes: a failure one of
// them posted, or a node whose agent stopped beating.
type watch struct {
	r     *rendezvous
	round int
	a     assignment
	beat  int64
	seen  map[int]string
	since map[int]time.Time
}

func (r *rendezvous) watch(round int, a assignment) nodeWatch {
	w := &watch{r: r, round: round, a: a, seen: map[int]string{}, since: map[int]time.Time{}}
	for n := range a.nnodes {
		w.since[n] = time.Now()
	}
	return w
}

// tick beats this node's heartbeat and returns why the round must end
// (another node's failure or loss), or "". Node 0 watches every other
// node's heartbeat and node 1 node 0's, each posting a lost node's
// failure; the others only look for a failure posted (two calls a tick,
// where each agent reading every other's heartbeat cost the store nodes²
// calls a tick).
func (w *watch) tick(ctx context.Context) string {
	r := w.r
	ctx, cancel := context.WithTimeout(ctx, heartbeatTimeout)
	defer cancel()
	w.beat++
	if err := r.client.Set(ctx, r.key(w.round, "beat", w.a.node), []byte(strconv.FormatInt(w.beat, 10))); err != nil {
		return r.gone(err)
	}
	if ok, err := r.client.Check(ctx, r.key(w.round, "failed")); err == nil && ok[0] {
		// Name the earliest failure any node saw.
		if first := r.firstFailure(ctx, w.round, w.a.node, w.a.nnodes, time.Now(), 0); first != "" {
			return first
		}
		v, _ := r.client.Get(ctx, r.key(w.round, "failed"))
		return quote.Text(v)
	}
	if lost := w.lostNode(ctx, w.watched()); lost != "" {
		r.fail(ctx, w.round, w.a.node, lost, time.Now())
		return lost
	}
	return ""
}

// watched are the nodes whose heartbeat this node watches.
func (w *watch) watched() []int {
	switch {
	case w.a.node == 0:
		var all []int
		for n := 1; n < w.a.nnodes; n++ {
			all = append(all, n)
		}
		return all
	case w.a.node == 1:
		return []int{0}
	}
	return nil
}

// lostNode scans the heartbeats of nodes: why one is taken for lost, or
// "".
func (w *watch) lostNode(ctx context.Context, nodes []int) string {
	r := w.r
	for _, n := range nodes {
		if done, err := r.client.Check(ctx, r.key(w.round, "done", n)); err == nil && done[0] {
			w.since[n] = time.Now()
			continue
		}
		ok, err := r.client.Check(ctx, r.key(w.round, "beat", n))
		if err != nil {
			return r.gone(err)
		}
		v := ""
		if ok[0] {
			b, _ := r.client.Get(ctx, r.key(w.round, "beat", n))
			v = string(b)
		}
		if v != w.seen[n] {
			w.seen[n], w.since[n] = v, time.Now()
		} else if time.Since(w.since[n]) > heartbeatTimeout {
			return fmt.Sprintf("node %d's agent stopped responding (no heartbeat for %s): its host died or ddprun was killed", n, heartbeatTimeout)
		}
	}
	return ""
}

// fail posts this node's failure for every agent of the round, with the
// time it was seen, so the agents can name the first one.
func (r *rendezvous) fail(ctx context.Context, round, node int, why string, seen time.Time) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	stamped := []byte(strconv.FormatInt(seen.UnixNano(), 10) + " " + why)
	_ = r.client.Set(ctx, r.key(round, "failure", node), stamped)
	_, _ = r.client.CompareSet(ctx, r.key(round, "failed"), nil, []byte(why))
}

// firstFailure returns the earliest failure another node than node
// posted in round, waiting up to wait for one, or "".
func (r *rendezvous) firstFailure(ctx context.Context, round, node, nnodes int, mine time.Time, wait time.Duration) string {
	ctx, cancel := context.WithTimeout(ctx, wait+time.Second)
	defer cancel()
	for deadline := time.Now().Add(wait); ; {
		best, bestAt := "", mine.UnixNano()
		for n := range nnodes {
			if n == node {
				continue
			}
			ok, err := r.client.Check(ctx, r.key(round, "failure", n))
			if err != nil || !ok[0] {
				continue
			}
			v, err := r.client.Get(ctx, r.key(round, "failure", n))
			if err != nil {
				continue
			}
			at, msg, _ := strings.Cut(string(v), " ")
			if t, err := strconv.ParseInt(at, 10, 64); err == nil && t < bestAt {
				best, bestAt = quote.Text([]byte(msg)), t
			}
		}
		if best != "" || time.Now().After(deadline) {
			return best
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// finish marks this node's workers done and, on the store's host, waits
// for the other nodes (their agents still use the store).
func (w *watch) finish(ctx context.Context) error {
	r := w.r
	ctx2, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := r.client.Set(ctx2, r.key(w.round, "done", w.a.node), []byte("1"))
	cancel()
	if err != nil || r.server == nil {
		return err
	}
	for {
		all := true
		for n := range w.a.nnodes {
			ok, err := r.client.Check(ctx, r.key(w.round, "done", n))
			if err != nil {
				return err
			}
			all = all && ok[0]
		}
		if all {
			return nil
		}
		if why := w.tick(ctx); why != "" {
			return errors.New(why)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(r.cfg.MonitorInterval):
		}
	}
}
