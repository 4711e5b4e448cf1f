package launch

// The running job's watch over the other nodes: heartbeats, failures
// posted through the rendezvous store, the first failure among them, and
// the end of a round.

import (
	"context"
	"fmt"
	"slices"
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
// (another node's failure or loss), or "", or the error of a store that
// stopped answering. Node 0 watches every other node's heartbeat and
// node 1 node 0's, each posting a lost node's failure; the others only
// look for a failure posted (two calls a tick, where each agent reading
// every other's heartbeat cost the store nodes² calls a tick).
func (w *watch) tick(ctx context.Context) (string, error) {
	r := w.r
	ctx, cancel := context.WithTimeout(ctx, heartbeatTimeout)
	defer cancel()
	w.beat++
	if err := r.client.Set(ctx, r.key(w.round, "beat", w.a.node), []byte(strconv.FormatInt(w.beat, 10))); err != nil {
		return "", r.gone(err)
	}
	failed, err := r.client.Check(ctx, r.key(w.round, "failed"))
	if err != nil {
		return "", r.gone(err)
	}
	if failed[0] {
		return w.failedRound(ctx)
	}
	lost, err := w.lostNode(ctx, w.watched())
	if err != nil || lost == "" {
		return "", err
	}
	if err := r.fail(ctx, w.round, w.a.node, lost, time.Now()); err != nil {
		return "", r.gone(fmt.Errorf("telling the other nodes that %s: %w", lost, err))
	}
	return lost, nil
}

// failedRound names the earliest failure any other node posted in the
// round, else the first one posted.
func (w *watch) failedRound(ctx context.Context) (string, error) {
	r := w.r
	first, err := r.firstFailure(ctx, w.round, w.a.node, w.a.nnodes, time.Now(), 0)
	if err != nil {
		return "", r.gone(err)
	}
	if first != "" {
		return first, nil
	}
	v, err := r.client.Get(ctx, r.key(w.round, "failed"))
	if err != nil {
		return "", r.gone(err)
	}
	return quote.Text(v), nil
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
func (w *watch) lostNode(ctx context.Context, nodes []int) (string, error) {
	r := w.r
	for _, n := range nodes {
		keys := []string{r.key(w.round, "done", n), r.key(w.round, "beat", n)}
		have, err := r.client.Check(ctx, keys...)
		if err != nil {
			return "", r.gone(err)
		}
		if have[0] {
			w.since[n] = time.Now()
			continue
		}
		v := ""
		if have[1] {
			b, err := r.client.Get(ctx, keys[1])
			if err != nil {
				return "", r.gone(err)
			}
			v = string(b)
		}
		if v != w.seen[n] {
			w.seen[n], w.since[n] = v, time.Now()
		} else if time.Since(w.since[n]) > heartbeatTimeout && v != survivedBeat {
			if _, err := r.update(ctx, func(s rdzvState) rdzvState { return s.lose(w.round, w.a.agents[n]) }); err != nil {
				return "", r.gone(err)
			}
			return fmt.Sprintf("node %d's agent stopped responding (no heartbeat for %s): its host died or ddprun was killed", n, heartbeatTimeout), nil
		}
	}
	return "", nil
}

// fail posts this node's failure for every agent of the round, with the
// time it was seen, so the agents can name the first one.
func (r *rendezvous) fail(ctx context.Context, round, node int, why string, seen time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	stamped := []byte(strconv.FormatInt(seen.UnixNano(), 10) + " " + why)
	if err := r.client.Set(ctx, r.key(round, "failure", node), stamped); err != nil {
		return fmt.Errorf("posting node %d's failure of round %d at %s: %w", node, round, r.addr, err)
	}
	if _, err := r.client.CompareSet(ctx, r.key(round, "failed"), nil, []byte(why)); err != nil {
		return fmt.Errorf("marking round %d failed at %s: %w", round, r.addr, err)
	}
	return nil
}

// firstFailure returns the earliest failure another node than node
// posted in round before mine, waiting up to wait for one, or "".
func (r *rendezvous) firstFailure(ctx context.Context, round, node, nnodes int, mine time.Time, wait time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, wait+time.Second)
	defer cancel()
	beaten := time.Now()
	for deadline := time.Now().Add(wait); ; {
		if time.Since(beaten) >= r.cfg.MonitorInterval {
			// Still alive while it waits: another node's agent, in the same
			// wait, must not take this one for lost (lostDuring).
			beaten = time.Now()
			if err := r.client.Set(ctx, r.key(round, "beat", node), []byte(strconv.FormatInt(beaten.UnixNano(), 10))); err != nil {
				return "", r.gone(err)
			}
		}
		best, bestAt := "", mine.UnixNano()
		for n := range nnodes {
			if n == node {
				continue
			}
			msg, at, err := r.failure(ctx, round, n)
			if err != nil {
				return "", err
			}
			if msg != "" && at < bestAt {
				best, bestAt = msg, at
			}
		}
		if best != "" || time.Now().After(deadline) {
			return best, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// failure is node's failure of round as it posted it, and when it was
// seen (Unix ns); "" when it posted none.
func (r *rendezvous) failure(ctx context.Context, round, node int) (string, int64, error) {
	key := r.key(round, "failure", node)
	ok, err := r.client.Check(ctx, key)
	if err != nil || !ok[0] {
		return "", 0, wrapFailureRead(err, node, round)
	}
	v, err := r.client.Get(ctx, key)
	if err != nil {
		return "", 0, wrapFailureRead(err, node, round)
	}
	at, msg, _ := strings.Cut(string(v), " ")
	t, err := strconv.ParseInt(at, 10, 64)
	if err != nil {
		// Not an agent's post: no time to order it by.
		return "", 0, nil
	}
	return quote.Text([]byte(msg)), t, nil
}

func wrapFailureRead(err error, node, round int) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("reading node %d's failure of round %d: %w", node, round, err)
}

// finish marks this node's workers done and, on the store's host, waits
// for the other nodes (their agents still use the store). It returns why
// the round failed meanwhile (another node's failure or loss), or the
// store's error.
func (w *watch) finish(ctx context.Context) (string, error) {
	r := w.r
	ctx2, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := r.client.Set(ctx2, r.key(w.round, "done", w.a.node), []byte("1"))
	cancel()
	if err != nil {
		return "", r.gone(fmt.Errorf("marking node %d's workers done: %w", w.a.node, err))
	}
	if r.server == nil {
		return "", nil
	}
	for {
		if all, err := w.allDone(ctx); err != nil || all {
			return "", err
		}
		if why, err := w.tick(ctx); why != "" || err != nil {
			return why, err
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("node %d waiting for the other nodes' workers to finish round %d: %w", w.a.node, w.round, context.Cause(ctx))
		case <-time.After(r.cfg.MonitorInterval):
		}
	}
}

// allDone reports whether every node marked its workers done.
func (w *watch) allDone(ctx context.Context) (bool, error) {
	keys := make([]string, w.a.nnodes)
	for n := range keys {
		keys[n] = w.r.key(w.round, "done", n)
	}
	done, err := w.r.client.Check(ctx, keys...)
	if err != nil {
		return false, w.r.gone(err)
	}
	return !slices.Contains(done, false), nil
}

// doneBeat stands for the heartbeat of a node whose workers finished.
const doneBeat = "done"

// heartbeats reads every node's heartbeat counter of round but skip's
// (doneBeat for a node whose workers finished).
func (r *rendezvous) heartbeats(ctx context.Context, round, nnodes, skip int) (map[int]string, error) {
	out := map[int]string{}
	for n := range nnodes {
		if n == skip {
			continue
		}
		keys := []string{r.key(round, "done", n), r.key(round, "beat", n)}
		have, err := r.client.Check(ctx, keys...)
		if err != nil {
			return nil, r.gone(err)
		}
		switch {
		case have[0]:
			out[n] = doneBeat
			continue
		case !have[1]:
			out[n] = ""
			continue
		}
		b, err := r.client.Get(ctx, keys[1])
		if err != nil {
			return nil, r.gone(err)
		}
		out[n] = string(b)
	}
	return out, nil
}
