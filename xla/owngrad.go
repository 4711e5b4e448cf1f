package xla

import (
	"sync"

	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/graph"
)

// GoMLX documents VJPRegistration as the place to swap a VJP. Where its
// rule lowers badly on XLA's CPU backend (a dot's gradient through a
// broadcast, a max-pool's through select-and-scatter), replay registers
// its own rule for the node it built; every other node of those types
// keeps GoMLX's.

// ownVJP returns the gradients of a node's inputs given v, the gradient of
// its (single) output.
type ownVJP func(v *graph.Node) []*graph.Node

// ownGradients maps the nodes replay built to their ownVJP; entries live
// while their graph is being built (replayContext.releaseOwnGradients).
var ownGradients sync.Map // *graph.Node -> ownVJP

func init() {
	for _, t := range []graph.NodeType{graph.NodeTypeDotGeneral, graph.NodeTypeReduceWindow} {
		gomlxRule := graph.VJPRegistration[t]
		graph.VJPRegistration[t] = func(n *graph.Node, v []*graph.Node, out shapes.Shape) []*graph.Node {
			if vjp, ok := ownGradients.Load(n); ok {
				return vjp.(ownVJP)(v[0])
			}
			return gomlxRule(n, v, out)
		}
	}
}

// withOwnGradient registers vjp as n's gradient rule for this replay.
func (rc *replayContext) withOwnGradient(n *graph.Node, vjp ownVJP) *graph.Node {
	ownGradients.Store(n, vjp)
	rc.ownGradientNodes = append(rc.ownGradientNodes, n)
	return n
}

// releaseOwnGradients forgets the rules this replay registered.
func (rc *replayContext) releaseOwnGradients() {
	for _, n := range rc.ownGradientNodes {
		ownGradients.Delete(n)
	}
	rc.ownGradientNodes = nil
}
