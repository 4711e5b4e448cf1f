package crossing

import (
	"context"
	"fmt"

	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
)

// Crossing is how a wrapped module's values cross replicas: the one
// choice that differs between layouts. ddp.Wrap picks InGraph when every
// replica of the job is local (one process) and the HostPath when the job
// spans processes, on every target. InGraph's replica group is this
// process's replicas, so Wrap refuses it for a job of several processes.
//
// Every replica calls each method at the same point of its program, on
// its own device, with tensors named and ordered alike.
type Crossing interface {
	// MeanGradients replaces the gradient of every tensor in params (each
	// has one) by its mean over every replica of the job.
	MeanGradients(ctx context.Context, dev *xla.Device, params []nn.Named) error
	// BroadcastFromFirst assigns global replica 0's value to every tensor.
	BroadcastFromFirst(ctx context.Context, dev *xla.Device, tensors []nn.Named) error
	// ReduceScatter gives this replica its shard of every run's mean
	// gradient (a sharded optimizer's Step). The runs are laid out alike
	// on every replica.
	ReduceScatter(ctx context.Context, dev *xla.Device, params []nn.Named, flats []*Flat) ([]*xla.Tensor, error)
	// AllGather assigns every parameter of the runs from every replica's
	// shard of it (shards[i] is this replica's shard of flats[i]).
	AllGather(ctx context.Context, dev *xla.Device, params []nn.Named, flats []*Flat, shards []*xla.Tensor) error
	// CombineScalar combines a scalar over every replica of the job by op.
	CombineScalar(ctx context.Context, dev *xla.Device, partial *xla.Tensor, op xla.ReduceOp) (*xla.Tensor, error)
}

// InGraph crosses replicas with XLA collectives over the device's replica
// group (xla.Device.Replica): recorded into the step's program, no host
// copy. A group of one is left alone: its mean and broadcast are the
// identity, and recording them would only cost tracing time.
type InGraph struct{}

// MeanGradients divides each gradient by the replica count and records
// an all-reduce sum of it.
func (InGraph) MeanGradients(_ context.Context, dev *xla.Device, params []nn.Named) error {
	_, count := dev.Replica()
	if count == 1 {
		return nil
	}
	return divideAndSumLocally(params, count, count)
}

// BroadcastFromFirst records a broadcast from replica 0 of each tensor.
func (InGraph) BroadcastFromFirst(_ context.Context, dev *xla.Device, tensors []nn.Named) error {
	if _, count := dev.Replica(); count == 1 {
		return nil
	}
	for _, t := range tensors {
		if err := t.Tensor.Assign(xla.Broadcast(t.Tensor.Detach(), 0)); err != nil {
			return fmt.Errorf("broadcasting %s from replica 0: %w", t.Name, err)
		}
	}
	return nil
}
