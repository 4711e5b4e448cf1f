package xla

import (
	"fmt"

	"github.com/gomlx/gomlx/core/graph"
)

// RNGState returns the device's random state: what its next draw starts
// from (torch's get_rng_state). A checkpoint that saves it lets a resumed
// run draw the dropout masks an uninterrupted one would.
func (d *Device) RNGState() *Tensor { return d.rng }

// SetRNGState makes state, a value RNGState returned (in this run or, from
// a checkpoint, another), the device's random state (torch's
// set_rng_state).
func (d *Device) SetRNGState(state *Tensor) error {
	if state == nil {
		return fmt.Errorf("xla: SetRNGState on %s: no state", d)
	}
	if state.err != nil {
		return fmt.Errorf("xla: SetRNGState on %s: %w", d, state.err)
	}
	if state.dev != d {
		return fmt.Errorf("xla: SetRNGState on %s: the state is on %s; upload it to this device", d, state.dev)
	}
	if !state.shape.Equal(graph.RNGStateShape) {
		return fmt.Errorf("xla: SetRNGState on %s: a random state is %s, not %s", d, graph.RNGStateShape, state.shape)
	}
	d.rng = state
	return nil
}
