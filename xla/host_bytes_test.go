package xla

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFromBytesRoundTrip: every dtype's bytes come back unchanged, from
// a slice at an odd (unaligned) offset, and the tensor does not follow
// later writes to the caller's bytes; CopyBytesTo returns the same bytes
// and refuses a destination of the wrong size.
func TestFromBytesRoundTrip(t *testing.T) {
	e := newEngine(t, 1)
	d := e.Device(0)
	ctx := t.Context()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, dt := range SupportedDTypes {
		t.Run(dt.String(), func(t *testing.T) {
			dims := []int{3, 5}
			size := 15 * int(dt.Size())
			backing := make([]byte, size+1)
			data := backing[1:]
			for i := range data {
				data[i] = byte(rng.IntN(256))
			}
			if dt == Bool {
				for i := range data {
					data[i] &= 1
				}
			}
			want := append([]byte(nil), data...)
			x, err := FromBytes(d, dt, dims, data)
			require.NoError(t, err)
			clear(data)
			got, err := x.Bytes(ctx)
			require.NoError(t, err)
			assert.Equal(t, want, got)
			into := make([]byte, size)
			require.NoError(t, x.CopyBytesTo(ctx, into))
			assert.Equal(t, want, into)
			assert.ErrorContains(t, x.CopyBytesTo(ctx, make([]byte, size+1)), "want")
		})
	}
}

// TestDeviceBytes: the plugin's size of a buffer, for a pending value (it
// is computed first), a bfloat16 one and an empty one; a failed tensor's
// error comes back.
func TestDeviceBytes(t *testing.T) {
	d := newEngine(t, 1).Device(0)
	ctx := t.Context()
	x := d.Ones(Float32, 3, 5).AddScalar(1)
	n, err := x.DeviceBytes(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 60, n)
	n, err = x.Cast(BFloat16).DeviceBytes(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 30, n)
	n, err = d.Zeros(Float32, 0, 4).DeviceBytes(ctx)
	require.NoError(t, err)
	assert.Zero(t, n)
	_, err = x.Reshape(7).DeviceBytes(ctx)
	assert.Error(t, err)
}
