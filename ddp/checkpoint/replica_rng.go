package checkpoint

import (
	"context"
	"fmt"
	"slices"

	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/ddp/internal/exchange"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
	"github.com/xladdp/xladdp/xla/safetensors"
)

// ReplicaRNGName is the tensor of a job of several replicas' checkpoint
// (with optim.Checkpoint.RNG) that holds every replica's random state,
// one row each in global replica order (process rank, then local
// replica): the replicas of one process are seeded apart, and ranks may
// seed by rank, so one device's state ("rng.device", replica 0's) cannot
// resume them all.
const ReplicaRNGName = "ddp.replica_rng"

// replicaRNGs returns every replica's random state in global replica
// order, to every local replica (nil without c.RNG or with one replica
// in the job). Every replica calls it at the same point, after a
// MarkStep.
func replicaRNGs(ctx context.Context, dev *xla.Device, g *dist.ProcessGroup, c optim.Checkpoint) ([][]byte, error) {
	_, local := dev.Replica()
	_, procs := processRank()
	if c.RNG == nil || local*procs == 1 {
		return nil, nil
	}
	mine, err := c.RNG.RNGState().Bytes(ctx)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: reading the random state: %w", err)
	}
	timeout := exchange.Timeout(g)
	locals, err := exchange.GatherLocal(ctx, dev, timeout, "gathering the replicas' random states", mine)
	if err != nil {
		return nil, err
	}
	return exchange.HostOnce(ctx, dev, timeout, "gathering the ranks' random states", func() ([][]byte, error) {
		if procs == 1 {
			return locals, nil
		}
		ranks, err := exchange.AllGatherBytes(ctx, g, slices.Concat(locals...))
		if err != nil {
			return nil, fmt.Errorf("checkpoint: gathering the ranks' random states: %w", err)
		}
		var all [][]byte
		for r, b := range ranks {
			if len(b) != len(mine)*local {
				return nil, fmt.Errorf("checkpoint: rank %d sent %d bytes of random state, not %d (%d replicas of %d bytes)", r, len(b), len(mine)*local, local, len(mine))
			}
			for i := range local {
				all = append(all, b[i*len(mine):(i+1)*len(mine)])
			}
		}
		return all, nil
	})
}

// replicaRNGSource is the ReplicaRNGName tensor of states, for a file.
func replicaRNGSource(rng *xla.Device, states [][]byte) safetensors.Source {
	state := rng.RNGState()
	return safetensors.Source{
		Layout: safetensors.Layout{Name: ReplicaRNGName, DType: nn.SafetensorsDType(state.DType()), Shape: append([]int{len(states)}, state.Dims()...)},
		Read: func(dst []byte) error {
			copy(dst, slices.Concat(states...))
			return nil
		},
	}
}

// stageReplicaRNG uploads this replica's row of the file's ReplicaRNGName
// tensor, to be made c.RNG's state once the rest of the checkpoint is
// restored; nil when there is nothing to restore that way (no c.RNG, no
// such tensor, which a single-replica job's file lacks, and
// optim.RestoreCheckpoint's "rng.device" applies; or a file of another
// replica count, which no resume can follow bit for bit, so each replica
// keeps its own seeding rather than all drawing alike).
func stageReplicaRNG(dev *xla.Device, file safetensors.File, path string, c *optim.Checkpoint) (*xla.Tensor, bool, error) {
	if c.RNG == nil {
		return nil, false, nil
	}
	table, ok := file.Lookup(ReplicaRNGName)
	if !ok {
		return nil, false, nil
	}
	state := c.RNG.RNGState()
	index, local := dev.Replica()
	rank, procs := processRank()
	want := append([]int{local * procs}, state.Dims()...)
	if table.DType != nn.SafetensorsDType(state.DType()) || len(table.Shape) != len(want) || !slices.Equal(table.Shape[1:], want[1:]) {
		return nil, false, fmt.Errorf("checkpoint: %s: %s is %s %v, not the random states of %v", path, ReplicaRNGName, table.DType, table.Shape, want)
	}
	if table.Shape[0] != want[0] {
		return nil, true, nil
	}
	row := len(table.Data) / table.Shape[0]
	global := rank*local + index
	staged, err := xla.FromBytes(c.RNG, state.DType(), state.Dims(), table.Data[global*row:(global+1)*row])
	if err != nil {
		return nil, false, fmt.Errorf("checkpoint: %s: uploading the random state of replica %d: %w", path, global, err)
	}
	return staged, true, nil
}

// processRank is this process's rank and the job's process count.
func processRank() (rank, size int) {
	g := dist.Current()
	return g.Rank(), g.WorldSize()
}
