package xla

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// StepFunc is a training or inference step for Compile: it records ops on
// its arguments and on the tensors it reaches (parameters, optimizer state,
// the device RNG) and returns the values the caller wants.
type StepFunc func(args ...*Tensor) ([]*Tensor, error)

// CompiledStep is a step function traced once per input signature and then
// run from its compiled program without running the Go function again, as
// jax.jit and torch_xla.compile do. See Compile.
type CompiledStep struct {
	fn StepFunc
	mu sync.Mutex
	// plans holds, per device and group, the traced plans by signature.
	plans map[planPlace]map[string][]*stepPlan
}

// planPlace is where a plan runs: its device, in its group (a replica's
// position decides the per-replica inputs baked into its plan).
type planPlace struct {
	device *Device
	group  *group
}

// maxPlansPerDevice bounds the traced signatures kept per device, and
// maxGuardVariants the plans per signature that differ in which gradients
// existed: a step called with ever-changing shapes retraces, never grows
// without bound.
const (
	maxPlansPerDevice = 64
	maxGuardVariants  = 8
)

// Compile returns fn as a compiled step. The first Run with a signature
// (the arguments' shapes and dtypes, the replica group, and whether each
// gradient fn looks at before replacing it exists) runs fn once as in
// lazy mode and records
// what it did: which buffers the program reads and from where (an
// argument, a tensor fn reached, the device RNG, a gradient), and which
// tensors it left holding results. Later Runs with that signature run the
// program directly on the current buffers and update those tensors in
// place: parameters and optimizer state change as fn would change them,
// the RNG advances, gradients are set, and under RunReplicas the replicas
// meet and run one SPMD program with its collectives, as at MarkStep.
//
// fn must do the same thing on every call, as under jax.jit: Go values it
// reads (a learning rate in a Go variable, a step counter, a branch on
// whether state exists yet) are frozen at the trace; hold what changes in
// a tensor (the optimizers keep their learning rate on the device, so
// SetLR works) or pass it as an argument. Tensors fn creates from host
// values (FromSlice, Hyperparameter) are constants of the step. fn must
// not read values (Item, ToHost, MarkStep): that is an error during the
// trace. A tensor fn replaces in a Go structure instead of assigning it
// is not followed; Assign it instead, as torch's in-place updates do.
func Compile(fn StepFunc) *CompiledStep {
	return &CompiledStep{fn: fn, plans: map[planPlace]map[string][]*stepPlan{}}
}

// Run runs the step on device d with args, all on d. Pending lazy work on
// d is run first (a MarkStep), as torch_xla.compile does. It returns fn's
// results, materialized or in flight (reading them waits). Called while
// another compiled step traces on d, fn runs inline in that trace.
func (s *CompiledStep) Run(ctx context.Context, d *Device, args ...*Tensor) ([]*Tensor, error) {
	if err := checkRunArgs(d, args); err != nil {
		return nil, err
	}
	if _, capturing := d.observer.(*capture); capturing {
		return s.fn(args...)
	}
	if len(d.pending) > 0 {
		if err := d.MarkStep(ctx); err != nil {
			return nil, err
		}
	}
	for i, a := range args {
		if err := a.materialize(ctx); err != nil {
			return nil, fmt.Errorf("xla: CompiledStep.Run: argument %d: %w", i, err)
		}
	}
	g := d.currentGroup()
	place := planPlace{device: d, group: g}
	sig := signature(args)
	plan := s.lookup(place, string(sig))
	stale := plan
	if plan != nil {
		outs, err, ok := plan.replay(ctx, g, args)
		if ok {
			return outs, err
		}
	}
	plan, outs, err := s.trace(ctx, d, args)
	if err != nil {
		return nil, err
	}
	s.keep(place, string(sig), stale, plan)
	metrics.stepTraced()
	return outs, nil
}

// checkRunArgs checks Run's device and arguments.
func checkRunArgs(d *Device, args []*Tensor) error {
	if d == nil {
		return errors.New("xla: CompiledStep.Run: nil device")
	}
	for i, a := range args {
		if a == nil {
			return fmt.Errorf("xla: CompiledStep.Run: argument %d is nil", i)
		}
		if a.err != nil {
			return fmt.Errorf("xla: CompiledStep.Run: argument %d: %w", i, a.err)
		}
		if a.dev != d {
			return fmt.Errorf("xla: CompiledStep.Run on %s: argument %d is on %s; copy it with Tensor.To", d, i, a.dev)
		}
	}
	return nil
}

// lookup is the first plan at place for the signature sig whose guard
// holds, nil where none does.
func (s *CompiledStep) lookup(place planPlace, sig string) *stepPlan {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.plans[place][sig] {
		if p.guardHolds() {
			return p
		}
	}
	return nil
}

// keep stores plan, traced at place for the signature sig, in place of
// stale (the plan found that no longer fits, or nil).
func (s *CompiledStep) keep(place planPlace, sig string, stale, plan *stepPlan) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// A device is in one group at a time, and a group that ended never
	// meets again: its plans (and the tensors they hold) go.
	for other := range s.plans {
		if other.device == place.device && other.group != place.group {
			delete(s.plans, other)
		}
	}
	byPlace := s.plans[place]
	if byPlace == nil || len(byPlace) >= maxPlansPerDevice {
		byPlace = map[string][]*stepPlan{}
		s.plans[place] = byPlace
	}
	// A plan whose inputs no longer fit is replaced, not kept first in line.
	variants := slices.DeleteFunc(byPlace[sig], func(p *stepPlan) bool { return p == stale })
	if len(variants) >= maxGuardVariants {
		variants = nil
	}
	byPlace[sig] = append(variants, plan)
}

// signature is what decides a plan besides its place and its gradient
// guard: the arguments' shapes.
func signature(args []*Tensor) []byte {
	b := make([]byte, 0, 64)
	for _, a := range args {
		b = binary.AppendUvarint(b, uint64(a.shape.DType))
		b = binary.AppendUvarint(b, uint64(a.shape.Rank()))
		for _, dim := range a.shape.Dimensions {
			b = binary.AppendUvarint(b, uint64(dim))
		}
	}
	return b
}
