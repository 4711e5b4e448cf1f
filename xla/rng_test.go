package xla

import (
	"testing"

	"github.com/xladdp/xladdp/backend"

	"github.com/gomlx/gomlx/core/graph"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRNGStateReplaysDraws: a state saved with RNGState, restored with
// SetRNGState (from host values, as from a checkpoint), replays the same
// draws; anything but a state of this device is refused.
func TestRNGStateReplaysDraws(t *testing.T) {
	b, err := backend.Open(t.Context(), backend.Options{Target: backend.CPU, CPUDevices: 2})
	require.NoError(t, err)
	e := NewEngine(b)
	t.Cleanup(func() { _ = e.Close() })
	d := e.Device(0)
	_ = d.RandU(Float32, 3) // advance it past the seed
	state := d.RNGState()
	saved, err := state.Bytes(t.Context())
	require.NoError(t, err)
	first, err := d.RandN(Float32, 5).Float32s(t.Context())
	require.NoError(t, err)
	_, err = d.RandU(Float32, 7).Float32s(t.Context())
	require.NoError(t, err)

	restored, err := FromBytes(d, state.DType(), state.Shape().Dimensions, saved)
	require.NoError(t, err)
	require.NoError(t, d.SetRNGState(restored))
	again, err := d.RandN(Float32, 5).Float32s(t.Context())
	require.NoError(t, err)
	assert.Equal(t, first, again, "the restored state draws what the saved one did")

	other, err := FromBytes(e.Device(1), state.DType(), state.Shape().Dimensions, saved)
	require.NoError(t, err)
	assert.ErrorContains(t, d.SetRNGState(other), "the state is on")
	wrong, err := FromSlice(d, []float32{1, 2, 3}, 3)
	require.NoError(t, err)
	assert.ErrorContains(t, d.SetRNGState(wrong), "a random state is "+graph.RNGStateShape.String())
	assert.ErrorContains(t, d.SetRNGState(nil), "no state")
}
