package canonical

// Node is a node of the canonical summation tree over micro-shards
// [Lo, Hi): a leaf is one micro-shard's gradient, an inner node the sum
// of its halves (the left one taking the odd micro-shard). The tree is
// fixed by Count alone, so every way of cutting it among replicas sums
// the same terms in the same order.
type Node struct{ Lo, Hi int }

// Leaf reports whether n is one micro-shard.
func (n Node) Leaf() bool { return n.Hi-n.Lo == 1 }

// Halves are n's children, the left one taking the odd micro-shard.
func (n Node) Halves() (Node, Node) {
	mid := n.Lo + (n.Hi-n.Lo+1)/2
	return Node{n.Lo, mid}, Node{mid, n.Hi}
}

// Covering returns the largest nodes of the canonical tree over
// count micro-shards lying wholly inside [first, end), left to right: the
// sums a replica holding those micro-shards can form on its own.
func Covering(count, first, end int) []Node {
	var out []Node
	var visit func(n Node)
	visit = func(n Node) {
		switch {
		case n.Hi <= first || n.Lo >= end:
		case n.Lo >= first && n.Hi <= end:
			out = append(out, n)
		default:
			l, r := n.Halves()
			visit(l)
			visit(r)
		}
	}
	visit(Node{0, count})
	return out
}

// Fold evaluates the canonical tree over count micro-shards from the
// values of covering nodes (value returns a node's, or false for one to
// split further): add is the one place the sums are formed.
func Fold[T any](count int, value func(Node) (T, bool), add func(a, b T) T) T {
	var eval func(n Node) T
	eval = func(n Node) T {
		if v, ok := value(n); ok {
			return v
		}
		l, r := n.Halves()
		return add(eval(l), eval(r))
	}
	return eval(Node{0, count})
}

// SumOver forms node n's sum of the canonical tree from its leaves.
func SumOver[T any](n Node, leaf func(int) T, add func(a, b T) T) T {
	if n.Leaf() {
		return leaf(n.Lo)
	}
	l, r := n.Halves()
	return add(SumOver(l, leaf, add), SumOver(r, leaf, add))
}

// FoldHost evaluates the canonical tree from the given nodes' values.
func FoldHost(count int, nodes []Node, values [][]float32) []float32 {
	index := make(map[Node]int, len(nodes))
	for i, n := range nodes {
		index[n] = i
	}
	return Fold(count, func(n Node) ([]float32, bool) {
		i, ok := index[n]
		if !ok {
			return nil, false
		}
		return values[i], true
	}, AddFloat32s)
}

// AddFloat32s is the host's one sum, element by element in float32, as
// the device's float32 add rounds.
func AddFloat32s(a, b []float32) []float32 {
	out := make([]float32, len(a))
	for i := range out {
		out[i] = a[i] + b[i]
	}
	return out
}
