package xla

import (
	"runtime/debug"
	"testing"
	"time"

	"github.com/gomlx/go-xla/pjrt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDeviceBuffersDoNotWaitForGoHeapGrowth: steps that each replace a
// 4 MiB buffer, with Go's own collections off (as when a large Go heap
// makes them rare): MarkStep collects by the device memory made, so the
// buffers alive stay near the budget's worth instead of one per step.
func TestDeviceBuffersDoNotWaitForGoHeapGrowth(t *testing.T) {
	const elems, steps = 1 << 20, 200 // 4 MiB per buffer, 800 MiB made in all
	cases := []struct {
		name string
		step func(t *testing.T, d *Device, x *Tensor) *Tensor
	}{
		{"program outputs", func(t *testing.T, d *Device, x *Tensor) *Tensor { return x.AddScalar(1) }},
		{"uploads", func(t *testing.T, d *Device, _ *Tensor) *Tensor {
			return mustFromSlice(t, d, make([]float32, elems), elems)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, 1)
			d := e.Device(0)
			ctx := testContext(t)
			defer debug.SetGCPercent(debug.SetGCPercent(-1))
			before := settledBuffers()
			ResetMetrics()
			x := mustFromSlice(t, d, make([]float32, elems), elems)
			for range steps {
				x = tc.step(t, d, x)
				require.NoError(t, d.MarkStep(ctx))
			}
			m := GetMetrics()
			assert.GreaterOrEqual(t, m.BufferCollections, int64(steps*4/(bufferBudget>>20)-1), "a collection per budget of buffers made")
			alive := settledBuffers() - before
			assert.LessOrEqual(t, alive, int64(2*bufferBudget/(4<<20)+8), "4 MiB buffers alive after %d steps", steps)
		})
	}
}

// settledBuffers is the PJRT buffers alive once the cleanups a collection
// queued have run.
func settledBuffers() int64 {
	last := pjrt.BuffersAlive()
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
		now := pjrt.BuffersAlive()
		if now == last {
			return now
		}
		last = now
	}
	return last
}
