package xla

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFormatPrintsValues: the float verbs print the value of every dtype,
// with width and precision, materializing a pending tensor; %v describes
// without computing; a failed, nil or empty tensor prints without panic.
func TestFormatPrintsValues(t *testing.T) {
	eng := newEngine(t, 1)
	d := eng.Device(0)
	base := mustFromSlice(t, d, []float32{1.5, -2, 0}, 3)
	for _, dt := range SupportedDTypes {
		x := base.Add(base).Sub(base).Cast(dt)
		require.True(t, x.IsPending())
		assert.Contains(t, fmt.Sprintf("%v", x), "pending", dt.String())
		assert.True(t, x.IsPending(), "%v computes nothing", dt)
		want := map[DType]string{Bool: "[1.0 1.0 0.0]", Int32: "[1.0 -2.0 0.0]", Int64: "[1.0 -2.0 0.0]", Uint64: "[1.0 0.0 0.0]"}[dt]
		if want == "" {
			want = "[1.5 -2.0 0.0]"
		}
		if dt == Uint64 {
			// -2 cast to uint64 wraps; only its first and last values are checked.
			got := fmt.Sprintf("%.1f", x)
			assert.Regexp(t, `^\[1\.0 \d+\.0 0\.0\]$`, got, dt.String())
			continue
		}
		assert.Equal(t, want, fmt.Sprintf("%.1f", x), dt.String())
	}
	loss := base.Square().Mean()
	assert.Equal(t, "  2.0833", fmt.Sprintf("%8.4f", loss), "a one-element tensor prints as a number")
	assert.Equal(t, "2.08E+00", fmt.Sprintf("%.2E", loss))
	assert.Equal(t, "[]", fmt.Sprintf("%f", d.Zeros(Float32, 0, 4)))
	failed := d.failed(base.shape, errors.New("boom"))
	assert.Equal(t, "%!f(boom)", fmt.Sprintf("%f", failed))
	var nilTensor *Tensor
	assert.Equal(t, "<nil tensor>", fmt.Sprintf("%f", nilTensor))
	assert.Equal(t, "<nil tensor>", fmt.Sprintf("%v", nilTensor))
}
