package ddp

import (
	"fmt"
)

// MicroShards is how a deterministic job cuts each global batch: Count
// micro-shards of Size samples, micro-shard m holding the batch's samples
// [m·Size, (m+1)·Size). It depends on the global batch and the micro-shard
// size only, never on the replicas that run it: that is what makes the
// trained weights the same at every world size.
type MicroShards struct {
	GlobalBatch, Size, Count int
}

// NewMicroShards checks that size divides the global batch.
func NewMicroShards(globalBatch, size int) (MicroShards, error) {
	switch {
	case globalBatch < 1 || size < 1:
		return MicroShards{}, fmt.Errorf("ddp: micro-shards of %d samples in a global batch of %d: both must be positive", size, globalBatch)
	case globalBatch%size != 0:
		return MicroShards{}, fmt.Errorf("ddp: a micro-shard of %d samples does not divide the global batch of %d: "+
			"pick a micro-shard size that does (a divisor of %d)", size, globalBatch, globalBatch)
	}
	return MicroShards{GlobalBatch: globalBatch, Size: size, Count: globalBatch / size}, nil
}

// Range is the run of micro-shards [first, end) global replica replica of
// replicas computes: contiguous, the first Count mod replicas replicas
// taking one more.
func (s MicroShards) Range(replica, replicas int) (first, end int) {
	base, extra := s.Count/replicas, s.Count%replicas
	first = replica*base + min(replica, extra)
	end = first + base
	if replica < extra {
		end++
	}
	return first, end
}

// CheckReplicas refuses a world size with more replicas than micro-shards:
// some replica would have nothing to compute.
func (s MicroShards) CheckReplicas(replicas int) error {
	if replicas > s.Count {
		return fmt.Errorf("ddp: %d replicas for %d micro-shards of %d samples (global batch %d): every replica needs one; "+
			"use a smaller micro-shard size (it must divide %d) or fewer replicas", replicas, s.Count, s.Size, s.GlobalBatch, s.GlobalBatch)
	}
	return nil
}

// treeNode is a node of the canonical summation tree over micro-shards
// [lo, hi): a leaf is one micro-shard's gradient, an inner node the sum
// of its halves (the left one taking the odd micro-shard). The tree is
// fixed by Count alone, so every way of cutting it among replicas sums
// the same terms in the same order.
type treeNode struct{ lo, hi int }

func (n treeNode) leaf() bool { return n.hi-n.lo == 1 }

func (n treeNode) halves() (treeNode, treeNode) {
	mid := n.lo + (n.hi-n.lo+1)/2
	return treeNode{n.lo, mid}, treeNode{mid, n.hi}
}

// coveringNodes returns the largest nodes of the canonical tree over
// count micro-shards lying wholly inside [first, end), left to right: the
// sums a replica holding those micro-shards can form on its own.
func coveringNodes(count, first, end int) []treeNode {
	var out []treeNode
	var visit func(n treeNode)
	visit = func(n treeNode) {
		switch {
		case n.hi <= first || n.lo >= end:
		case n.lo >= first && n.hi <= end:
			out = append(out, n)
		default:
			l, r := n.halves()
			visit(l)
			visit(r)
		}
	}
	visit(treeNode{0, count})
	return out
}

// foldTree evaluates the canonical tree over count micro-shards from the
// values of covering nodes (value returns a node's, or false for one to
// split further): add is the one place the sums are formed.
func foldTree[T any](count int, value func(treeNode) (T, bool), add func(a, b T) T) T {
	var eval func(n treeNode) T
	eval = func(n treeNode) T {
		if v, ok := value(n); ok {
			return v
		}
		l, r := n.halves()
		return add(eval(l), eval(r))
	}
	return eval(treeNode{0, count})
}
