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
// wrapper keeps their values as of the last step whose exchange returned,
// and gives them back when an exchange fails: a survivor of a lost peer
// then commits the step it completed with that step's statistics
// (checkpoint.Salvage), not the ones the failed step's forward left. Only
// the host path keeps them: its exchange has run the step's program, so
// they are materialized there and keeping them aliases buffers (no
// program, no copy), and only a job of several processes loses a peer.

// combineGradients averages the gradients of params over every replica,
// keeping the buffers of the step once that returned and giving the last
// kept ones back when it failed.
func (m *DistributedDataParallel) combineGradients(ctx context.Context, params []nn.Named) error {
	if err := m.collectives.MeanGradients(ctx, m.dev, params); err != nil {
		return errors.Join(err, m.restoreCompletedBuffers())
	}
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
