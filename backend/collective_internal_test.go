package backend

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/distributed"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAllReduceAcrossDevices gives each of 4 CPU devices (and, as an edge
// case, a single device) different values,
// all-reduces them in-graph as one SPMD program, and checks every device got
// the float64 host reference. Sums are compared with a relative tolerance of
// 1e-6 (XLA may add in any order); max, min and product of 4 float32 values
// are checked to 1 ulp-scale tolerance too, max and min exactly.
func TestAllReduceAcrossDevices(t *testing.T) {
	for _, numDevices := range []int{4, 1} {
		t.Run(fmt.Sprintf("%d devices", numDevices), func(t *testing.T) {
			testAllReduce(t, numDevices)
		})
	}
}

func testAllReduce(t *testing.T, numDevices int) {
	const size = 7
	b := openCPU(t, numDevices)
	rng := rand.New(rand.NewPCG(42, 7))
	inputs := make([][]float32, numDevices)
	for d := range inputs {
		inputs[d] = make([]float32, size)
		for i := range inputs[d] {
			inputs[d][i] = float32(rng.NormFloat64() * 10)
		}
	}
	tests := []struct {
		op      compute.ReduceOpType
		combine func(acc, v float64) float64
		relTol  float64
	}{
		{compute.ReduceOpSum, func(a, v float64) float64 { return a + v }, 1e-6},
		{compute.ReduceOpMax, math.Max, 0},
		{compute.ReduceOpMin, math.Min, 0},
		{compute.ReduceOpProduct, func(a, v float64) float64 { return a * v }, 1e-6},
	}
	for _, tt := range tests {
		t.Run(tt.op.String(), func(t *testing.T) {
			want := make([]float64, size)
			for i := range want {
				want[i] = float64(inputs[0][i])
				for d := 1; d < numDevices; d++ {
					want[i] = tt.combine(want[i], float64(inputs[d][i]))
				}
			}
			mesh, err := distributed.NewDeviceMesh([]int{numDevices}, []string{"replica"})
			require.NoError(t, err)
			g := graph.NewGraph(b.GoMLX(), "allreduce_"+tt.op.String())
			require.NoError(t, g.SetSPMD(mesh))
			assignment := make([]compute.DeviceNum, numDevices)
			for d := range assignment {
				assignment[d] = compute.DeviceNum(d)
			}
			require.NoError(t, g.SetDeviceAssignment(assignment))
			x := graph.Parameter(g, "x", shapes.Make(dtypes.Float32, size))
			g.Compile(g.Distributed().AllReduceOne(x, tt.op))

			args := make([]any, numDevices)
			for d := range args {
				args[d] = inputs[d]
			}
			outputs := g.Run(args...)
			require.Len(t, outputs, numDevices, "one output per device")
			for d, out := range outputs {
				device, err := out.Device()
				require.NoError(t, err)
				assert.Equal(t, compute.DeviceNum(d), device, "output %d lives on its own device", d)
				got := out.Value().([]float32)
				for i := range want {
					tol := tt.relTol * math.Abs(want[i])
					assert.InDelta(t, want[i], float64(got[i]), tol, fmt.Sprintf("device %d element %d", d, i))
				}
			}
		})
	}
}
