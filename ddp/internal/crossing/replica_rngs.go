package crossing

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/ddp/internal/exchange"
	"github.com/xladdp/xladdp/xla"
)

// replicaRNGs keeps every replica's random state as of the last step
// whose gradient exchange returned: the states are gathered before each
// exchange and become the job's once it returned, the same moment the
// step counts as completed. A survivor of a lost peer commits them with
// that step (checkpoint.Salvage), so that a resume at the same world
// size draws as the uninterrupted run would: the lost rank's state lives
// on in the others.
type replicaRNGs struct {
	mu        sync.Mutex
	committed [][]byte
}

// CombinedRNGStates is every replica's random state (global replica
// order: process rank, then local replica) as of the last step whose
// gradient exchange returned on this process; nil before any.
func (h *HostPath) CombinedRNGStates() [][]byte {
	h.rngs.mu.Lock()
	defer h.rngs.mu.Unlock()
	return h.rngs.committed
}

// commitRNGs makes states the job's (local replica 0, once the step's
// exchange returned).
func (h *HostPath) commitRNGs(dev *xla.Device, states [][]byte) {
	if index, _ := dev.Replica(); index != 0 {
		return
	}
	h.rngs.mu.Lock()
	defer h.rngs.mu.Unlock()
	h.rngs.committed = states
}

// gatherRNGs is every replica's random state now (after the step's
// draws): this process's replicas gathered locally, then the processes'
// in one all-gather of equal rows.
func (h *HostPath) gatherRNGs(ctx context.Context, dev *xla.Device) ([][]byte, error) {
	mine, err := dev.RNGState().Bytes(ctx)
	if err != nil {
		return nil, fmt.Errorf("ddp: reading the random state: %w", err)
	}
	timeout := h.group.Timeout()
	locals, err := exchange.GatherLocal(ctx, dev, timeout, "gathering the replicas' random states", mine)
	if err != nil {
		return nil, err
	}
	return exchange.HostOnce(ctx, dev, timeout, "gathering the ranks' random states", func() ([][]byte, error) {
		row := (len(mine)*len(locals) + 7) &^ 7 // an Int64 buffer's whole words
		src := make([]byte, row)
		copy(src, slices.Concat(locals...))
		all := make([]byte, row*h.group.WorldSize())
		if err := h.group.AllGather(ctx, dist.ByteBuffer(dist.Int64, all), dist.ByteBuffer(dist.Int64, src)); err != nil {
			return nil, err
		}
		var states [][]byte
		for r := range h.group.WorldSize() {
			for i := range locals {
				start := r*row + i*len(mine)
				states = append(states, all[start:start+len(mine)])
			}
		}
		return states, nil
	})
}
