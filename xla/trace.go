package xla

import (
	"crypto/sha256"
	"encoding/binary"
	"math"
)

// fingerprint identifies a trace's program: op kinds, attributes, shapes,
// dtypes and which inputs feed each node by position. Never buffer values.
type fingerprint [sha256.Size]byte

// trace is one device's program for a MarkStep.
type trace struct {
	device *Device
	// nodes in topological order; index maps a node to its position.
	nodes []*node
	index map[*node]int
	// params are the parameter nodes in order of first use: program inputs.
	params []*node
	// outputs are the distinct pending nodes of live handles: program outputs.
	outputs []*node
	// handles are the live pending handles; handleOutput[i] is the index in
	// outputs of handles[i]'s node.
	handles      []*Tensor
	handleOutput []int
	fingerprint  fingerprint
	err          error
}

// collectTrace walks from the device's live pending handles to build the
// program MarkStep compiles. Call only after a GC, so dropped handles are gone.
func collectTrace(d *Device) *trace {
	tr := &trace{device: d, index: map[*node]int{}}
	outputIndex := map[*node]int{}
	for _, h := range d.livePending() {
		if h.err != nil {
			if tr.err == nil {
				tr.err = h.err
			}
			continue
		}
		k, ok := outputIndex[h.node]
		if !ok {
			k = len(tr.outputs)
			outputIndex[h.node] = k
			tr.outputs = append(tr.outputs, h.node)
			tr.visit(h.node)
		}
		tr.handles = append(tr.handles, h)
		tr.handleOutput = append(tr.handleOutput, k)
	}
	tr.fingerprint = tr.computeFingerprint()
	return tr
}

// visit appends n and everything it depends on in post-order, iteratively
// so deep traces (many steps before one MarkStep) cannot overflow the stack.
func (tr *trace) visit(root *node) {
	type frame struct {
		n    *node
		next int
	}
	if _, done := tr.index[root]; done {
		return
	}
	stack := []frame{{n: root}}
	onStack := map[*node]bool{root: true}
	for len(stack) > 0 {
		top := &stack[len(stack)-1]
		if top.next < len(top.n.inputs) {
			in := top.n.inputs[top.next]
			top.next++
			if _, done := tr.index[in]; !done && !onStack[in] {
				onStack[in] = true
				stack = append(stack, frame{n: in})
			}
			continue
		}
		n := top.n
		stack = stack[:len(stack)-1]
		tr.index[n] = len(tr.nodes)
		tr.nodes = append(tr.nodes, n)
		if n.op == opParameter {
			tr.params = append(tr.params, n)
		}
	}
}

func (tr *trace) computeFingerprint() fingerprint {
	h := sha256.New()
	var buf [8]byte
	putInt := func(v int) {
		binary.LittleEndian.PutUint64(buf[:], uint64(v))
		h.Write(buf[:])
	}
	putString := func(s string) {
		putInt(len(s))
		h.Write([]byte(s))
	}
	for _, n := range tr.nodes {
		putString(n.op.name)
		putInt(int(n.shape.DType))
		putInt(n.shape.Rank())
		for _, d := range n.shape.Dimensions {
			putInt(d)
		}
		putInt(len(n.inputs))
		for _, in := range n.inputs {
			putInt(tr.index[in])
		}
		putInt(len(n.attrs.ints))
		for _, v := range n.attrs.ints {
			putInt(v)
		}
		binary.LittleEndian.PutUint64(buf[:], math.Float64bits(n.attrs.float))
		h.Write(buf[:])
		putString(n.attrs.str)
		putInt(int(n.attrs.dtype))
	}
	putInt(len(tr.outputs))
	for _, o := range tr.outputs {
		putInt(tr.index[o])
	}
	var fp fingerprint
	copy(fp[:], h.Sum(nil))
	return fp
}

// describe lists the trace one node per line, for error messages and
// recompilation reports.
func (tr *trace) describe() []string {
	lines := make([]string, len(tr.nodes))
	for i, n := range tr.nodes {
		lines[i] = n.describe(tr.index)
	}
	return lines
}
