package exchange

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/xladdp/xladdp/xla"
)

// localExchange hands the result of a host operation from local replica
// 0, which alone talks to the other processes, to the other replicas of
// its RunReplicas group, so host traffic is one copy per process. Every
// replica numbers the operations it takes part in alike, and a result is
// kept until each replica has taken it. It lives with the replica group
// (xla.ReplicaValue).
type localExchange struct {
	mu      sync.Mutex
	changed chan struct{} // closed and replaced at each publish
	results map[uint64]*localResult
	gathers map[uint64]*localGather
	rounds  map[*xla.Device]uint64
}

type localResult struct {
	value   any
	err     error
	pending int // replicas that have not taken it yet
}

var exchangeKey = new(xla.ReplicaKey[*localExchange])

// exchangeOf returns the exchange of dev's replica group.
func exchangeOf(dev *xla.Device) *localExchange {
	return xla.ReplicaValue(dev, exchangeKey, func() *localExchange {
		return &localExchange{changed: make(chan struct{}), results: map[uint64]*localResult{}, rounds: map[*xla.Device]uint64{}}
	})
}

// next returns the number of d's next operation.
func (x *localExchange) next(d *xla.Device) uint64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.rounds[d]++
	return x.rounds[d]
}

// publish posts round's result for the other count-1 replicas.
func (x *localExchange) publish(round uint64, count int, value any, err error) {
	if count < 2 {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.results[round] = &localResult{value: value, err: err, pending: count - 1}
	close(x.changed)
	x.changed = make(chan struct{})
}

// await waits for round's result from replica 0.
func (x *localExchange) await(ctx context.Context, round uint64, timeout time.Duration, what string) (any, error) {
	limit := time.NewTimer(timeout)
	defer limit.Stop()
	for {
		x.mu.Lock()
		if r := x.results[round]; r != nil {
			if r.pending--; r.pending == 0 {
				delete(x.results, round)
			}
			x.mu.Unlock()
			return r.value, r.err
		}
		changed := x.changed
		x.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for local replica 0 to finish %s: %w", what, context.Cause(ctx))
		case <-limit.C:
			return nil, fmt.Errorf("waiting for local replica 0 to finish %s: no result in %s", what, timeout)
		}
	}
}

// HostOnce runs fn on local replica 0 of dev's group and hands its
// result to the other local replicas, which wait for it (within timeout).
func HostOnce[T any](ctx context.Context, dev *xla.Device, timeout time.Duration, what string, fn func() (T, error)) (T, error) {
	index, count := dev.Replica()
	x := exchangeOf(dev)
	round := x.next(dev)
	if index == 0 {
		v, err := fn()
		x.publish(round, count, v, err)
		return v, err
	}
	var zero T
	v, err := x.await(ctx, round, timeout, what)
	if err != nil {
		return zero, err
	}
	t, _ := v.(T)
	return t, nil
}

// localGather is one GatherLocal round: each replica's value by index.
type localGather struct {
	values  []any
	posted  int
	pending int // replicas that have not read it yet
}

// GatherLocal returns every local replica's value, in replica order, to
// each of them; they wait for each other (within timeout).
func GatherLocal[T any](ctx context.Context, dev *xla.Device, timeout time.Duration, what string, mine T) ([]T, error) {
	index, count := dev.Replica()
	if count == 1 {
		return []T{mine}, nil
	}
	x := exchangeOf(dev)
	round := x.next(dev)
	x.mu.Lock()
	if x.gathers == nil {
		x.gathers = map[uint64]*localGather{}
	}
	g := x.gathers[round]
	if g == nil {
		g = &localGather{values: make([]any, count), pending: count}
		x.gathers[round] = g
	}
	g.values[index] = mine
	g.posted++
	if g.posted == count {
		close(x.changed)
		x.changed = make(chan struct{})
	}
	x.mu.Unlock()
	limit := time.NewTimer(timeout)
	defer limit.Stop()
	for {
		x.mu.Lock()
		if g.posted == count {
			if g.pending--; g.pending == 0 {
				delete(x.gathers, round)
			}
			x.mu.Unlock()
			out := make([]T, count)
			for i, v := range g.values {
				out[i], _ = v.(T)
			}
			return out, nil
		}
		changed := x.changed
		x.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, fmt.Errorf("%s: waiting for the other local replicas: %w", what, context.Cause(ctx))
		case <-limit.C:
			return nil, fmt.Errorf("%s: the other local replicas did not arrive in %s", what, timeout)
		}
	}
}
