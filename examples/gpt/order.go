package main

import (
	"fmt"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/ddp/training"
)

// order is the training split's samples in epoch order: sample i is the
// window of block characters at i×block (its targets one further), every
// epoch a permutation of them shared by the replicas (torch's
// DistributedSampler, seeded by --seed and the epoch), replica r taking
// global positions r, r+W…; a step uses the next global batch of the
// order, and an epoch's tail too short for one is dropped. The position,
// the epoch and the samples of its order used, resumes an epoch on the
// same replica count exactly and on another with every sample used once.
type order struct {
	sampler      *ddp.DistributedSampler
	perReplica   int // samples a replica takes per step
	global       int // samples a step takes over all the replicas
	epoch, used  int
	mine         []int // this replica's indices of the epoch, from the position resumed at
	next         int
	stepsInEpoch int // of a whole epoch
}

func newOrder(tokens, block int, seed uint64, replicas, rank, perReplica int) (*order, error) {
	windows := (tokens - 1) / block
	if windows < perReplica*replicas {
		return nil, fmt.Errorf("the training split holds %d windows of --block %d, fewer than one global batch of %d: give more text or a smaller --batch-size",
			windows, block, perReplica*replicas)
	}
	s, err := ddp.NewDistributedSampler(windows, ddp.SamplerReplicas(replicas, rank), ddp.SamplerSeed(seed), ddp.DropLast())
	if err != nil {
		return nil, err
	}
	return &order{sampler: s, perReplica: perReplica, global: perReplica * replicas,
		stepsInEpoch: windows / replicas / perReplica}, nil
}

// ResumeAt continues from a checkpoint's position: the first samples of
// epoch's order were used.
func (o *order) ResumeAt(epoch, samples int) error {
	o.epoch, o.used, o.mine = epoch, samples, nil
	return o.sampler.ResumeAt(epoch, samples)
}

// GlobalBatch is a step's samples over the job: the order as a
// training.Loop's.
func (o *order) GlobalBatch() int { return o.global }

// afterSteps is the position after steps whole steps at this global
// batch: a --resume checkpoint's, which holds the step alone.
func (o *order) afterSteps(steps int) training.Position {
	return training.Position{Epoch: steps / o.stepsInEpoch, Samples: steps % o.stepsInEpoch * o.global, Step: steps}
}

// take returns the epoch and this replica's samples of the next step.
func (o *order) take() (epoch int, samples []int) {
	if o.mine == nil {
		o.mine, o.next = o.sampler.Indices(o.epoch), 0
	}
	if o.next+o.perReplica > len(o.mine) {
		o.epoch, o.used = o.epoch+1, 0
		o.mine, o.next = o.sampler.Indices(o.epoch), 0
	}
	samples = o.mine[o.next : o.next+o.perReplica]
	o.next += o.perReplica
	o.used += o.global
	return o.epoch, samples
}

// position is where the order stands after step steps.
func (o *order) position(steps int) training.Position {
	return training.Position{Epoch: o.epoch, Samples: o.used, Step: steps}
}

// windowsOf are samples' inputs and targets, rows of block characters.
func windowsOf(tokens []int32, samples []int, block int) (ids, targets []int32) {
	starts := make([]int, len(samples))
	for i, s := range samples {
		starts[i] = s * block
	}
	return windowsAt(tokens, starts, block)
}
