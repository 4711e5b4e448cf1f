package xla

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
)

// Replica is one of the local replicas RunReplicas started: it drives one
// device in its own goroutine.
type Replica struct {
	index, count int
	device       *Device
}

// Index returns the replica's position, 0..Count-1 (its local rank).
func (r Replica) Index() int { return r.index }

// Count returns how many replicas run.
func (r Replica) Count() int { return r.count }

// Device returns the device this replica drives.
func (r Replica) Device() *Device { return r.device }

// MarkStep compiles (on a cache miss) and runs what this replica traced,
// together with every other replica.
func (r Replica) MarkStep(ctx context.Context) error { return r.device.MarkStep(ctx) }

// MarkStep runs the trace: alone for a standalone device, or, inside
// RunReplicas, together with the other replicas as one SPMD program.
func (d *Device) MarkStep(ctx context.Context) error {
	if d.observer.tracing() {
		return fmt.Errorf("xla: MarkStep on %s while a compiled step traces (Item, ToHost or MarkStep inside the step): "+
			"a compiled step cannot read values; return them from the step instead", d)
	}
	g := d.currentGroup()
	return g.markStep(ctx, g.position(d))
}

func (d *Device) currentGroup() *group {
	d.engine.mu.Lock()
	defer d.engine.mu.Unlock()
	if d.group != nil {
		return d.group
	}
	return d.engine.standalone[d.num]
}

func (g *group) position(d *Device) int {
	for i, x := range g.devices {
		if x == d {
			return i
		}
	}
	panic("xla: device not in its group")
}

// RunReplicas runs fn once per local device 0..n-1, each in its own
// goroutine (spawn mode's engine, like xmp.spawn). At each MarkStep the
// replicas meet: they must have traced the same program, which is compiled
// once and executed on all n devices. If a replica returns an error or
// panics, or the replicas' programs differ, every replica's MarkStep fails
// and RunReplicas returns the first cause.
func (e *Engine) RunReplicas(ctx context.Context, n int, fn func(ctx context.Context, r Replica) error) error {
	if n < 1 || n > len(e.devices) {
		return fmt.Errorf("xla: RunReplicas(%d): the engine has %d device(s); open the backend with more (e.g. CPUDevices) or run fewer replicas",
			n, len(e.devices))
	}
	devices := e.devices[:n]
	g := newGroup(e, devices)
	g.replicated = true
	if err := e.claimReplicas(devices, g); err != nil {
		return err
	}
	if n > 1 {
		replicatedRuns.Add(1)
		defer replicatedRuns.Add(-1)
	}
	defer e.releaseReplicas(devices)
	return runGroup(ctx, g, devices, fn)
}

// claimReplicas puts devices in the group g, unless replicas already run
// on the engine.
func (e *Engine) claimReplicas(devices []*Device, g *group) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.replicasOn {
		return errors.New("xla: RunReplicas is already running on this engine")
	}
	e.replicasOn = true
	for _, d := range devices {
		d.group = g
	}
	return nil
}

// releaseReplicas takes devices out of their group once the replicas end.
func (e *Engine) releaseReplicas(devices []*Device) {
	e.mu.Lock()
	for _, d := range devices {
		d.group = nil
	}
	e.replicasOn = false
	e.mu.Unlock()
}

// runGroup runs fn on each of g's devices, each in its goroutine, and
// returns the first error (which breaks the group and cancels the
// others' ctx) or the group's.
func runGroup(ctx context.Context, g *group, devices []*Device, fn func(ctx context.Context, r Replica) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		wg       sync.WaitGroup
		firstMu  sync.Mutex
		firstErr error
	)
	fail := func(err error) {
		firstMu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		firstMu.Unlock()
		g.breakWith(err)
		cancel(err)
	}
	for i, d := range devices {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := runReplica(ctx, fn, Replica{index: i, count: len(devices), device: d})
			if err != nil {
				fail(err)
				return
			}
			g.finish(i)
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.broken
}

// replicatedRuns counts the RunReplicas calls of more than one replica
// running in this process.
var replicatedRuns atomic.Int64

// ReplicasRunning reports whether a RunReplicas of more than one replica
// is running in this process: code that splits work by process (ddp's
// DistributedSampler) must then be told which replica it serves.
func ReplicasRunning() bool { return replicatedRuns.Load() > 0 }

// ReplicaError is an error of one replica: its function failed or
// panicked, or its trace carried an op error at a MarkStep.
type ReplicaError struct {
	Replica int
	Err     error
}

func (e *ReplicaError) Error() string {
	var p *panicError
	if errors.As(e.Err, &p) {
		return fmt.Sprintf("replica %d panicked: %v", e.Replica, p.Error())
	}
	return fmt.Sprintf("replica %d: %v", e.Replica, e.Err)
}

// panicError is a replica function's panic, with the stack it panicked on.
type panicError struct {
	value any
	stack []byte
}

func (e *panicError) Error() string { return fmt.Sprintf("%v\n%s", e.value, e.stack) }

func (e *ReplicaError) Unwrap() error { return e.Err }

// runReplica calls fn, turning a panic into an error naming the replica.
// An error that already names its replica, or concerns the whole group
// (a divergence, a broken MarkStep), is returned as it is.
func runReplica(ctx context.Context, fn func(context.Context, Replica) error, r Replica) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &ReplicaError{Replica: r.index, Err: &panicError{value: p, stack: debug.Stack()}}
		}
	}()
	err = fn(ctx, r)
	var (
		named *ReplicaError
		group *groupError
	)
	switch {
	case err == nil:
		return nil
	case errors.As(err, &named), errors.As(err, &group), errors.Is(err, ErrReplicaMismatch):
		return err
	}
	return &ReplicaError{Replica: r.index, Err: err}
}

// groupError is an error about the replicas together (who waited for
// whom), already naming the replicas involved.
type groupError struct{ err error }

func (e *groupError) Error() string { return e.err.Error() }

func (e *groupError) Unwrap() error { return e.err }

// Replica returns the device's position in the replicas it meets at
// MarkStep and how many there are: inside RunReplicas, its replica index
// and count; a standalone device is replica 0 of 1.
func (d *Device) Replica() (index, count int) {
	g := d.currentGroup()
	return g.position(d), len(g.devices)
}

// ReplicaKey names a value of type T that the replicas meeting at
// MarkStep share (ReplicaValue). Declare one per use with new.
type ReplicaKey[T any] struct {
	_ byte // distinct keys have distinct addresses
}

// ReplicaValue returns the value stored under key for the replicas d
// meets at MarkStep, made by create on first use. It lives as long as
// that replica group: one RunReplicas call, or the engine's life for a
// standalone device. Packages that coordinate the replicas on the host
// (ddp hands one replica's host all-reduce to the others) keep their
// shared state here, so it never outlives the replicas nor leaks into a
// later RunReplicas.
func ReplicaValue[T any](d *Device, key *ReplicaKey[T], create func() T) T {
	g := d.currentGroup()
	g.mu.Lock()
	defer g.mu.Unlock()
	if v, ok := g.shared[key]; ok {
		return v.(T)
	}
	if g.shared == nil {
		g.shared = map[any]any{}
	}
	v := create()
	g.shared[key] = v
	return v
}
