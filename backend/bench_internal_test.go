package backend

import (
	"context"
	"fmt"
	"testing"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/distributed"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/stretchr/testify/require"
)

// BenchmarkOpenCPU measures creating and destroying a 4-device CPU client
// (the plugin itself stays loaded after the first Open).
func BenchmarkOpenCPU(b *testing.B) {
	clearTargetEnv(b)
	for b.Loop() {
		be, err := Open(context.Background(), Options{Target: CPU, CPUDevices: 4})
		require.NoError(b, err)
		require.NoError(b, be.Close())
	}
}

// BenchmarkInGraphAllReduce measures one execution of a compiled SUM
// all-reduce of a float32 vector across 4 CPU devices, inputs already on the
// devices. Bus bandwidth counts 2(n-1)/n of the bytes, as for a ring.
func BenchmarkInGraphAllReduce(b *testing.B) {
	const numDevices = 4
	for _, elems := range []int{1 << 10, 1 << 20, 1 << 24} {
		b.Run(fmt.Sprintf("%dKiB", elems*4/1024), func(b *testing.B) {
			clearTargetEnv(b)
			be, err := Open(context.Background(), Options{Target: CPU, CPUDevices: numDevices})
			require.NoError(b, err)
			defer be.Close()
			mesh, err := distributed.NewDeviceMesh([]int{numDevices}, []string{"replica"})
			require.NoError(b, err)
			g := graph.NewGraph(be.GoMLX(), "bench_allreduce")
			require.NoError(b, g.SetSPMD(mesh))
			x := graph.Parameter(g, "x", shapes.Make(dtypes.Float32, elems))
			g.Compile(g.Distributed().AllReduceOne(x, compute.ReduceOpSum))
			args := make([]any, numDevices)
			for d := range args {
				t := tensors.FromShape(shapes.Make(dtypes.Float32, elems))
				err := t.MaterializeOnDevice(be.GoMLX(), false, compute.DeviceNum(d))
				require.NoError(b, err)
				args[d] = t
			}
			bytes := int64(elems * 4)
			b.SetBytes(bytes)
			for b.Loop() {
				for _, out := range g.Run(args...) {
					_ = out.FinalizeAll()
				}
			}
			busBytes := float64(bytes) * 2 * (numDevices - 1) / numDevices
			b.ReportMetric(busBytes*float64(b.N)/b.Elapsed().Seconds()/1e9, "busGB/s")
		})
	}
}
