package xla

import (
	"fmt"
	"strings"

	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/graph"
)

// opDef is one kind of recorded operation and how it replays into GoMLX.
type opDef struct {
	name string
	// replay builds the GoMLX node(s) for n from its replayed inputs. It may
	// panic: GoMLX reports errors that way, and MarkStep recovers them.
	replay func(rc *replayContext, n *node, inputs []*graph.Node) *graph.Node
	// elementwise ops commute with permuting every operand's axes alike,
	// which lets replay run them channels-last (channels_last.go);
	// broadcasting ones carry their output dims in attrs.ints.
	elementwise, broadcasting bool
}

// attrs are an op's static attributes. They enter the fingerprint, so two
// nodes with equal attrs must replay to the same program.
type attrs struct {
	ints  []int
	float float64
	str   string
	dtype DType
}

func (a attrs) String() string {
	var b strings.Builder
	if len(a.ints) > 0 {
		fmt.Fprintf(&b, "%v", a.ints)
	}
	if a.float != 0 {
		fmt.Fprintf(&b, " f=%g", a.float)
	}
	if a.str != "" {
		fmt.Fprintf(&b, " %s", a.str)
	}
	if a.dtype != 0 {
		fmt.Fprintf(&b, " %s", a.dtype)
	}
	return strings.TrimSpace(b.String())
}

// node is one value in a trace: the result of op applied to inputs. Nodes
// are reachable only from Tensor handles, so what the program dropped is
// not computed.
type node struct {
	op     *opDef
	attrs  attrs
	inputs []*node
	shape  shapes.Shape
	// data is the device buffer holding the node's value: set for parameter
	// nodes, and by MarkStep on the nodes it computed. A node with data is
	// read as a program input, never recomputed.
	data *deviceData
	// needsGrad: the value depends on a RequiresGrad leaf through ops a
	// gradient flows through (not through gradients or Detach).
	needsGrad bool
	// differentiated: a Backward went through this node. Its recipe is not
	// kept past MarkStep (torch frees a graph after backward), so an
	// ordinary training loop holds no previous step's buffers.
	differentiated bool
}

// isInput reports whether the node's value is a buffer: a program input.
func (n *node) isInput() bool { return n.data != nil }

// describe is the node's line in a trace listing, used in error messages
// and recompilation reports; inputs are given by their index in the listing.
func (n *node) describe(index map[*node]int) string {
	if n.isInput() {
		return fmt.Sprintf("%s() -> %s", opParameter.name, n.shape)
	}
	in := make([]string, len(n.inputs))
	for i, x := range n.inputs {
		in[i] = fmt.Sprintf("%%%d", index[x])
	}
	s := fmt.Sprintf("%s(%s) -> %s", n.op.name, strings.Join(in, ", "), n.shape)
	if a := n.attrs.String(); a != "" {
		s += " {" + a + "}"
	}
	return s
}
