package dist

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCurrentIsAGroupOfOne: without Init, Current is this process alone:
// rank 0 of 1, and every collective leaves what a group of one leaves (a
// reduction or broadcast the buffer itself, a gather or scatter the
// rank's own part), synchronous or queued; a point-to-point operation
// fails, naming why.
func TestCurrentIsAGroupOfOne(t *testing.T) {
	require.Nil(t, Default(), "this test runs before any Init")
	g := Current()
	require.Same(t, g, Current(), "one group of one per process")
	assert.Equal(t, []int{0, 1, 0, 1}, []int{g.Rank(), g.WorldSize(), g.LocalRank(), g.LocalWorldSize()})
	assert.Nil(t, g.Store())
	ctx := context.Background()
	v := Float32s([]float32{1, 2, 3, 4})
	require.NoError(t, g.AllReduce(ctx, v, Sum))
	require.NoError(t, g.AllReduceAsync(v, Max).Wait(ctx))
	require.NoError(t, g.Broadcast(ctx, v, 0))
	require.NoError(t, g.Barrier(ctx))
	out := Float32s(make([]float32, 4))
	require.NoError(t, g.AllGather(ctx, out, v))
	got, err := Values[float32](out)
	require.NoError(t, err)
	assert.Equal(t, []float32{1, 2, 3, 4}, got)
	all := Float32s(make([]float32, 4))
	require.NoError(t, g.AllToAllSingle(ctx, all, v, []int{4}, []int{4}))
	got, err = Values[float32](all)
	require.NoError(t, err)
	assert.Equal(t, []float32{1, 2, 3, 4}, got)
	assert.ErrorContains(t, g.Send(ctx, v, 0, 0), "Send to itself")
}
