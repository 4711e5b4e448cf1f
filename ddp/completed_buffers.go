package ddp

import (
	"context"
	"errors"
	"fmt"

	"github.com/xladdp/xladdp/ddp/internal/crossing"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
)

// A step's forward moves the module's buffers (BatchNorm's running
// statistics) before its gradients are combined. Across processes the
// wrapper keeps their values as each step's forward begins, once they
// came from global replica 0 (Forward's broadcast: the completed step's,
// alike on every replica), and gives them back when the step's exchange
// fails: a survivor of a lost peer then commits the step it completed
// with that step's statistics (checkpoint.Salvage), not the ones the
// failed step's forward left. Only the host path keeps them: there the
// broadcast uploaded them, so keeping them aliases buffers (no program,
// no copy), and only a job of several processes loses a peer.
//
// On the host path the broadcast of the next Forward is made at the end
// of the step's exchange instead (completeBuffers): the same values
// (global replica 0's as its forward left them), but held by every
// replica once the step completed, so that a survivor of replica 0
// commits that step with replica 0's statistics, not its own.

// combineGradients averages the gradients of params over every replica,
// giving the buffers kept as the step began back when that failed.
func (m *DistributedDataParallel) combineGradients(ctx context.Context, params []nn.Named) error {
	if err := m.collectives.MeanGradients(ctx, m.dev, params); err != nil {
		return errors.Join(err, m.restoreCompletedBuffers())
	}
	return nil
}

// completeBuffers ends a combined step on the host path: every replica
// takes global replica 0's buffers now, and keeps them as the step's;
// the next Forward does not broadcast again. A broadcast that fails
// gives the buffers the step began with back: the step did not complete.
func (m *DistributedDataParallel) completeBuffers(ctx context.Context) error {
	_, host := m.collectives.(*crossing.HostPath)
	if !host || m.cfg.manualSync || !m.cfg.broadcastBuffers || !m.mode.broadcastsBuffers() || len(m.buffers) == 0 {
		return nil
	}
	if err := m.broadcastBuffers(ctx); err != nil {
		return errors.Join(err, m.restoreCompletedBuffers())
	}
	m.synced = true
	return m.keepCompletedBuffers(ctx)
}

// keepCompletedBuffers keeps the buffers' values now, on the host path.
func (m *DistributedDataParallel) keepCompletedBuffers(ctx context.Context) error {
	if _, ok := m.collectives.(*crossing.HostPath); !ok || len(m.buffers) == 0 {
		return nil
	}
	kept := make([]*xla.Tensor, len(m.buffers))
	for i, b := range m.buffers {
		v, err := b.Tensor.To(ctx, m.dev)
		if err != nil {
			return fmt.Errorf("ddp: keeping buffer %s of the step: %w", b.Name, err)
		}
		kept[i] = v
	}
	m.completed = kept
	return nil
}

// restoreCompletedBuffers gives the buffers the kept values back.
func (m *DistributedDataParallel) restoreCompletedBuffers() error {
	for i, v := range m.completed {
		if err := m.buffers[i].Tensor.Assign(v); err != nil {
			return fmt.Errorf("ddp: giving buffer %s the last completed step's value back: %w", m.buffers[i].Name, err)
		}
	}
	return nil
}
