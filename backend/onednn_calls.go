package backend

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapeinference"

	"github.com/xladdp/xladdp/backend/internal/buildhook"
	"github.com/xladdp/xladdp/backend/internal/onednn"
	"github.com/xladdp/xladdp/backend/internal/pjrtx"
)

// oneDNNConvolution builds a convolution oneDNN runs as its custom call,
// in the program where GoMLX builds it; any other stays XLA's.
func oneDNNConvolution(f compute.Function, input, kernel compute.Value, c buildhook.Convolution) (compute.Value, bool, error) {
	conv, ok := oneDNNForm(c)
	if !ok {
		return nil, false, nil
	}
	out, err := shapeinference.ConvGeneral(c.Input, c.Kernel, c.Axes, c.Strides, c.Paddings,
		c.InputDilations, c.KernelDilations, c.ChannelGroups, c.BatchGroups)
	if err != nil || out.Rank() != 4 {
		return nil, false, nil // go-xla's own ConvGeneral says what is wrong
	}
	conv.Output = dims4(out.Dimensions)
	call, ok := onednn.Plan(conv)
	if !ok {
		return nil, false, nil
	}
	if call.KernelUnreversed {
		kernel = c.Unreversed
	}
	v, err := pjrtx.FFICustomCall(call.Target, call.Config(), []compute.Value{input, kernel}, out)
	if err != nil {
		return nil, false, err
	}
	slog.Debug("a convolution through oneDNN", "pass", call.Target, "input", c.Input, "kernel", c.Kernel)
	return v, true, nil
}

// oneDNNForm is c as onednn.Plan reads it; false where it is not a 2-D
// convolution.
func oneDNNForm(c buildhook.Convolution) (onednn.Convolution, bool) {
	if c.Input.Rank() != 4 || c.Kernel.Rank() != 4 || len(c.Axes.InputSpatial) != 2 {
		return onednn.Convolution{}, false
	}
	strides, okS := pair(c.Strides)
	inputDilation, okI := pair(c.InputDilations)
	kernelDilation, okK := pair(c.KernelDilations)
	if !okS || !okI || !okK {
		return onednn.Convolution{}, false
	}
	conv := onednn.Convolution{
		Layout:  layoutOf(c.Axes),
		Float32: c.Input.DType == dtypes.Float32 && c.Kernel.DType == dtypes.Float32,
		Input:   dims4(c.Input.Dimensions), Kernel: dims4(c.Kernel.Dimensions),
		Strides: strides, InputDilation: inputDilation, KernelDilation: kernelDilation,
		Groups: max(c.ChannelGroups, 1), BatchGroups: max(c.BatchGroups, 1),
		KernelReversed: c.KernelReversed && slices.Equal(sortedCopy(c.ReversedAxes), c.Axes.KernelSpatial),
	}
	if len(c.Paddings) == 2 {
		conv.Low = [2]int64{int64(c.Paddings[0][0]), int64(c.Paddings[1][0])}
		conv.High = [2]int64{int64(c.Paddings[0][1]), int64(c.Paddings[1][1])}
	} else if len(c.Paddings) != 0 {
		return onednn.Convolution{}, false
	}
	return conv, true
}

// layoutOf writes axes as StableHLO's dimension numbers:
// "[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]".
func layoutOf(axes compute.ConvolveAxesConfig) string {
	side := func(roles map[int]string, spatial []int) string {
		names := make([]string, 2+len(spatial))
		for axis, role := range roles {
			if axis < 0 || axis >= len(names) {
				return "?"
			}
			names[axis] = role
		}
		for s, axis := range spatial {
			if axis < 0 || axis >= len(names) {
				return "?"
			}
			names[axis] = fmt.Sprint(s)
		}
		return "[" + strings.Join(names, ", ") + "]"
	}
	return side(map[int]string{axes.InputBatch: "b", axes.InputChannels: "f"}, axes.InputSpatial) + "x" +
		side(map[int]string{axes.KernelInputChannels: "i", axes.KernelOutputChannels: "o"}, axes.KernelSpatial) + "->" +
		side(map[int]string{axes.OutputBatch: "b", axes.OutputChannels: "f"}, axes.OutputSpatial)
}

func dims4(d []int) [4]int64 {
	var out [4]int64
	for i := range min(len(d), 4) {
		out[i] = int64(d[i])
	}
	return out
}

// pair is a 2-D window parameter, 1 where GoMLX left it unset; false
// where it is not 2-D.
func pair(v []int) ([2]int64, bool) {
	switch len(v) {
	case 0:
		return [2]int64{1, 1}, true
	case 2:
		return [2]int64{int64(v[0]), int64(v[1])}, true
	default:
		return [2]int64{}, false
	}
}

func sortedCopy(v []int) []int {
	s := slices.Clone(v)
	slices.Sort(s)
	return s
}
