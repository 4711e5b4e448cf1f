package xla

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/backend"
)

// TestCloseRefusesNewWorkAndDrains closes the engine while goroutines
// upload, run steps and read back: every call either completes or fails
// with backend.ErrClosed, and nothing crashes. After Close every entry
// point says the backend is closed.
func TestCloseRefusesNewWorkAndDrains(t *testing.T) {
	for round := range 10 {
		e := newEngine(t, 2)
		ctx := testContext(t)
		var wg sync.WaitGroup
		errs := make(chan error, 1000)
		working := make(chan struct{}, 2)
		for dev := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d := e.Device(dev)
				for i := range 50 {
					x, err := FromSlice(d, []float32{1, 2, 3, float32(i)}, 4)
					if err != nil {
						errs <- err
						return
					}
					y := x.MulScalar(2).AddScalar(1)
					if _, err := y.Float32s(ctx); err != nil {
						errs <- err
						return
					}
					if i == 0 {
						working <- struct{}{}
					}
				}
			}()
		}
		<-working
		<-working
		require.NoError(t, e.Close(), "round %d", round)
		wg.Wait()
		close(errs)
		for err := range errs {
			assert.ErrorIs(t, err, backend.ErrClosed, "round %d: a use racing Close fails only because of Close", round)
		}
	}

	e := newEngine(t, 1)
	d := e.Device(0)
	ctx := testContext(t)
	materialized := mustFromSlice(t, d, []float32{1, 2}, 2)
	pending := materialized.AddScalar(1)
	require.NoError(t, e.Close())
	require.NoError(t, e.Close(), "closing twice is a no-op")

	_, err := FromSlice(d, []float32{1}, 1)
	assert.ErrorIs(t, err, backend.ErrClosed)
	assert.ErrorContains(t, err, "backend closed")
	_, err = materialized.Float32s(ctx)
	assert.ErrorIs(t, err, backend.ErrClosed)
	_, err = pending.Float32s(ctx)
	assert.ErrorIs(t, err, backend.ErrClosed)
	assert.NotContains(t, err.Error(), "mesh", "the message says the backend is closed, not a mesh size")
	assert.ErrorIs(t, d.MarkStep(ctx), backend.ErrClosed)
	err = e.RunReplicas(ctx, 1, func(ctx context.Context, r Replica) error {
		_ = r.Device().Ones(Float32, 2).AddScalar(1)
		return r.MarkStep(ctx)
	})
	assert.ErrorIs(t, err, backend.ErrClosed)
	assert.True(t, errors.Is(d.ManualSeed(3), backend.ErrClosed))
}

// TestToCopiesAcrossDevices: the cross-device error names Tensor.To (it
// used to suggest a To() that did not exist), and To copies values, pending
// or not, to another device.
func TestToCopiesAcrossDevices(t *testing.T) {
	e := newEngine(t, 2)
	ctx := testContext(t)
	a := mustFromSlice(t, e.Device(0), []float32{1, 2, 3}, 3)
	b := mustFromSlice(t, e.Device(1), []float32{10, 20, 30}, 3)
	assert.ErrorContains(t, a.Add(b).Err(), "operands on different devices (cpu:0 and cpu:1): copy one with Tensor.To(ctx, device)")
	moved, err := a.MulScalar(2).To(ctx, e.Device(1)) // pending: runs a MarkStep first
	require.NoError(t, err)
	assert.Equal(t, e.Device(1), moved.Device())
	got, err := moved.Add(b).Float32s(ctx)
	require.NoError(t, err)
	assert.Equal(t, []float32{12, 24, 36}, got)
	same, err := b.To(ctx, e.Device(1))
	require.NoError(t, err)
	got, err = same.Float32s(ctx)
	require.NoError(t, err)
	assert.Equal(t, []float32{10, 20, 30}, got)
}
