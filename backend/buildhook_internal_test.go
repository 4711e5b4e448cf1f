package backend

import (
	"errors"
	"testing"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/backend/internal/buildhook"
	"github.com/xladdp/xladdp/backend/internal/onednn"
)

// channelsLast is the engine's convolution layout (xla/ops_nn.go).
var channelsLast = compute.ConvolveAxesConfig{
	InputBatch: 0, InputChannels: 3, InputSpatial: []int{1, 2},
	KernelOutputChannels: 3, KernelInputChannels: 2, KernelSpatial: []int{0, 1},
	OutputBatch: 0, OutputChannels: 3, OutputSpatial: []int{1, 2},
}

// TestBuildHookSeesEveryConvolution: a program built on the hooked
// backend hands the hook its forward convolution and the two GoMLX's
// gradient builds, the input gradient's kernel known as a spatial
// reverse of the kernel, each in the layout onednn.Plan names; with the
// hook declining, the program is go-xla's own and computes the same as
// on the plain backend. Closures (a While loop, a sort's comparator)
// cross the wrapper both ways.
func TestBuildHookSeesEveryConvolution(t *testing.T) {
	b := openCPU(t, 1)
	var seen []buildhook.Convolution
	hooked := buildhook.Wrap(b.gomlx, func(_ compute.Function, _, _ compute.Value, c buildhook.Convolution) (compute.Value, bool, error) {
		seen = append(seen, c)
		return nil, false, nil
	})
	program := func(x, w *graph.Node) []*graph.Node {
		y := graph.Convolve(x, w).AxesConfig(channelsLast).PaddingPerDim([][2]int{{1, 1}, {1, 1}}).Done()
		loss := graph.ReduceAllSum(graph.Square(y))
		grads := graph.Gradient(loss, x, w)
		g := x.Graph()
		cond := graph.NewClosure(g, func(g *graph.Graph) []*graph.Node {
			i := graph.Parameter(g, "i", shapes.Make(dtypes.Int32))
			return []*graph.Node{graph.LessThan(i, graph.Const(g, int32(11)))}
		})
		body := graph.NewClosure(g, func(g *graph.Graph) []*graph.Node {
			return []*graph.Node{graph.AddScalar(graph.Parameter(g, "i", shapes.Make(dtypes.Int32)), 1)}
		})
		count := graph.While(cond, body, graph.Const(g, int32(1)))[0]
		sorted := graph.Sort(graph.Reshape(w, -1), 0, true)
		return []*graph.Node{loss, grads[0], grads[1], count, sorted}
	}
	x := make([]float32, 2*6*6*4)
	w := make([]float32, 3*3*4*8)
	for i := range x {
		x[i] = float32(i%7) - 3
	}
	for i := range w {
		w[i] = float32(i%5) - 2
	}
	plain, err := graph.NewExec(b.gomlx, program)
	require.NoError(t, err)
	viaHook, err := graph.NewExec(hooked, program)
	require.NoError(t, err)
	// A tensor lives on one backend: each run gets its own.
	inputs := func() (any, any) {
		return tensors.FromFlatDataAndDimensions(x, 2, 6, 6, 4), tensors.FromFlatDataAndDimensions(w, 3, 3, 4, 8)
	}
	want, err := plain.Call(inputs())
	require.NoError(t, err)
	got, err := viaHook.Call(inputs())
	require.NoError(t, err)
	require.Len(t, got, len(want))
	for i := range want {
		assert.Equal(t, want[i].Value(), got[i].Value(), "output %d", i)
	}
	assert.Equal(t, int32(11), got[3].Value())

	require.Len(t, seen, 3, "the forward convolution and its two gradients")
	layouts := map[string]buildhook.Convolution{}
	for _, c := range seen {
		conv, ok := oneDNNForm(c)
		require.True(t, ok)
		layouts[conv.Layout] = c
	}
	require.Contains(t, layouts, onednn.ForwardLayout)
	require.Contains(t, layouts, onednn.InputGradLayout)
	require.Contains(t, layouts, onednn.WeightGradLayout)
	assert.False(t, layouts[onednn.ForwardLayout].KernelReversed)
	assert.True(t, layouts[onednn.InputGradLayout].KernelReversed, "the input gradient's kernel is the reversed kernel")
	assert.ElementsMatch(t, []int{0, 1}, layouts[onednn.InputGradLayout].ReversedAxes)
}

// TestBuildHookErrorReachesTheCaller: a hook that fails makes building
// the program fail with its error, not panic or build a wrong program.
func TestBuildHookErrorReachesTheCaller(t *testing.T) {
	b := openCPU(t, 1)
	hooked := buildhook.Wrap(b.gomlx, func(compute.Function, compute.Value, compute.Value, buildhook.Convolution) (compute.Value, bool, error) {
		return nil, false, errors.New("the kernel library is gone")
	})
	exec, err := graph.NewExec(hooked, func(x, w *graph.Node) *graph.Node {
		return graph.Convolve(x, w).AxesConfig(channelsLast).Done()
	})
	require.NoError(t, err)
	_, err = exec.Call(tensors.FromFlatDataAndDimensions(make([]float32, 2*4*4*3), 2, 4, 4, 3),
		tensors.FromFlatDataAndDimensions(make([]float32, 3*3*3*2), 3, 3, 3, 2))
	assert.ErrorContains(t, err, "the kernel library is gone")
}
