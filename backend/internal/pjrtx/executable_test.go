package pjrtx

import (
	"unsafe"

	"testing"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/distributed"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	gomlxxla "github.com/gomlx/go-xla/compute/xla"
	"github.com/gomlx/go-xla/pjrt"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSerializeRoundTrip compiles a 2-device SPMD all-reduce, serializes it
// with the plugin, loads it back and runs the loaded copy: the plugin
// supports serialization and the reloaded executable computes the same.
func TestSerializeRoundTrip(t *testing.T) {
	gomlxxla.EnableAutoInstall(false)
	b, err := gomlxxla.NewWithOptions(installedCPUPlugin(t), map[string]any{"cpu_device_count": int64(2)})
	require.NoError(t, err, "the CPU plugin must be installed: run `make deps`")
	defer b.Finalize()
	client, err := ClientOf(b)
	require.NoError(t, err)

	mesh, err := distributed.NewDeviceMesh([]int{2}, []string{"replica"})
	require.NoError(t, err)
	g := graph.NewGraph(b, "roundtrip")
	require.NoError(t, g.SetSPMD(mesh))
	x := graph.Parameter(g, "x", shapes.Make(dtypes.Float32, 3))
	g.Compile(graph.MulScalar(g.Distributed().AllReduceOne(x, compute.ReduceOpSum), 2))

	compiled, err := LoadedExecutableOf(g)
	require.NoError(t, err)
	data, err := Serialize(compiled)
	require.NoError(t, err)
	require.NotEmpty(t, data)

	loaded, err := Deserialize(client, data, 2, []int{0, 1})
	require.NoError(t, err)
	in := make([]*pjrt.Buffer, 2)
	for d, v := range [][]float32{{1, 2, 3}, {10, 20, 30}} {
		in[d], err = client.BufferFromHost().FromFlatDataWithDimensions(v, []int{3}).ToDeviceNum(d).Done()
		require.NoError(t, err)
	}
	out, err := loaded.Execute(in...).DonateNone().Done()
	require.NoError(t, err)
	require.Len(t, out, 2)
	for d, buf := range out {
		got := make([]float32, 3)
		require.NoError(t, buf.ToHost(unsafeBytes(got)))
		assert.Equal(t, []float32{22, 44, 66}, got, "device %d", d)
	}

	_, err = Deserialize(client, []byte("not an executable"), 2, []int{0, 1})
	assert.ErrorContains(t, err, "PJRT_Executable_DeserializeAndLoad")
}

func unsafeBytes(f []float32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), len(f)*4)
}
