package xla

import (
	"slices"

	"github.com/gomlx/gomlx/core/graph"
)

// XLA's CPU backend runs convolutions and pools channels-last (NHWC): for
// the NCHW (torch) layout it wraps every convolution, and each of its
// gradients, in transposes, and the elementwise work between two layers
// (bias, ReLU, dropout, their gradients) runs on the NCHW copies. Replay
// keeps the channels-last result instead: a convolution or pool records
// its NHWC node beside the NCHW transpose it returns, and an elementwise op
// with such an operand runs on the NHWC nodes. The NCHW transposes stay
// valid for every other consumer (a reshape, a reduction, an output) and
// XLA drops those nobody reads, so the program computes the same values
// with the transposes only where the layout really changes.

// Output axis a of graph.TransposeAllAxes reads input axis perm[a].
var (
	toChannelsLast  = []int{0, 2, 3, 1} // NCHW -> NHWC
	toChannelsFirst = []int{0, 3, 1, 2} // NHWC -> NCHW
	toHWIO          = []int{2, 3, 1, 0} // OIHW kernel -> HWIO
)

// nhwc returns x [N, C, H, W] channels-last: its recorded NHWC node, or a
// transpose.
func (rc *replayContext) nhwc(x *graph.Node) *graph.Node {
	if s, ok := rc.channelsLast[x]; ok {
		return s
	}
	return graph.TransposeAllAxes(x, toChannelsLast...)
}

// fromNHWC returns the NCHW transpose of s [N, H, W, C] and records s as
// its channels-last form.
func (rc *replayContext) fromNHWC(s *graph.Node) *graph.Node {
	v := graph.TransposeAllAxes(s, toChannelsFirst...)
	rc.channelsLast[v] = s
	return v
}

// replayChannelsLast replays an elementwise rank-4 op channels-last when
// one of its operands has a channels-last form, or returns nil.
func (rc *replayContext) replayChannelsLast(n *node, ins []*graph.Node) *graph.Node {
	if !n.op.elementwise || n.shape.Rank() != 4 {
		return nil
	}
	if !slices.ContainsFunc(ins, func(x *graph.Node) bool { _, ok := rc.channelsLast[x]; return ok }) {
		return nil
	}
	dims := n.shape.Dimensions
	nhwcIns := make([]*graph.Node, len(ins))
	for i, x := range ins {
		if s, ok := rc.channelsLast[x]; ok {
			nhwcIns[i] = s
		} else {
			// No channels-last form: a bias [1, C, 1, 1] or a scalar,
			// whose transpose XLA folds into the broadcast, or a plain
			// NCHW tensor, transposed here as XLA would have.
			nhwcIns[i] = graph.TransposeAllAxes(broadcastTo(x, dims), toChannelsLast...)
		}
	}
	permuted := *n
	permuted.shape = n.shape.Clone()
	for a, from := range toChannelsLast {
		permuted.shape.Dimensions[a] = dims[from]
	}
	if n.op.broadcasting {
		permuted.attrs.ints = permuted.shape.Dimensions
	}
	return rc.fromNHWC(n.op.replay(rc, &permuted, nhwcIns))
}
