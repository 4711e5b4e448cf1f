package xla

import (
	"crypto/sha256"
	"encoding/binary"
	"hash/maphash"
	"math"
	"weak"
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
	// params are the nodes that read a buffer (isInput), in order of first
	// use: program inputs.
	params []*node
	// outputs are the distinct values of the live slots: program outputs.
	outputs []*node
	// handles are the live pending handles; handleOutput[i] is the index in
	// outputs of handles[i]'s node.
	handles      []*Tensor
	handleOutput []int
	fingerprint  fingerprint
	err          error
}

// recording is what a device recorded since its last MarkStep: every
// handle given a pending value or an error, once each in order of first
// appearance, with its last value.
type recording struct {
	device *Device
	slots  []pendingEntry
	// key identifies the recording: every recorded node (live or not),
	// every slot's value, never buffer values or GC state.
	key    uint64
	hasErr bool
	// liveness says which slots are program outputs; nil until learned.
	liveness *livenessEntry
}

// livenessEntry is what a recording key learned at its first MarkStep.
type livenessEntry struct {
	live []bool
	// program is the fingerprint of the program the live slots make.
	program    fingerprint
	hasProgram bool
}

// maxLivenessEntries bounds Device.liveness; a loop whose recording never
// repeats costs a GC per MarkStep, never unbounded memory.
const maxLivenessEntries = 1024

// record gathers the device's recording and looks up its liveness.
func (d *Device) record() *recording {
	r := &recording{device: d}
	at := make(map[weak.Pointer[Tensor]]int, len(d.pending))
	for _, e := range d.pending {
		if i, ok := at[e.handle]; ok {
			r.slots[i] = e
			continue
		}
		at[e.handle] = len(r.slots)
		r.slots = append(r.slots, e)
	}
	for _, sl := range r.slots {
		r.hasErr = r.hasErr || sl.err != nil
	}
	r.key = r.computeKey()
	// A recording with errors is always collected: a dropped error tensor
	// must not fail the step, and one still held must.
	if e := d.liveness[r.key]; e != nil && !r.hasErr && len(e.live) == len(r.slots) {
		r.liveness = e
	}
	return r
}

// learn decides liveness from the weak handles; call it only right after a
// GC, so handles the program dropped are gone.
func (r *recording) learn() {
	live := make([]bool, len(r.slots))
	for i, sl := range r.slots {
		h := sl.handle.Value()
		if sl.err != nil {
			live[i] = h != nil && h.err != nil
		} else {
			live[i] = h != nil && h.node == sl.node
		}
	}
	r.liveness = &livenessEntry{live: live}
	d := r.device
	if r.hasErr {
		return
	}
	if d.liveness == nil || len(d.liveness) >= maxLivenessEntries {
		d.liveness = map[uint64]*livenessEntry{}
	}
	d.liveness[r.key] = r.liveness
}

// computeKey hashes every node reachable from the slots, buffers read as
// inputs by shape only, and which node each slot holds.
func (r *recording) computeKey() uint64 {
	var h maphash.Hash
	h.SetSeed(recordingSeed)
	index := map[*node]int{}
	var buf [8]byte
	putInt := func(v int) {
		binary.LittleEndian.PutUint64(buf[:], uint64(v))
		h.Write(buf[:])
	}
	hashNode := func(n *node) {
		index[n] = len(index)
		putInt(int(n.shape.DType))
		putInt(n.shape.Rank())
		for _, d := range n.shape.Dimensions {
			putInt(d)
		}
		if n.isInput() {
			putInt(-1)
			return
		}
		h.WriteString(n.op.name)
		putInt(len(n.inputs))
		for _, in := range n.inputs {
			putInt(index[in])
		}
		for _, v := range n.attrs.ints {
			putInt(v)
		}
		putInt(int(math.Float64bits(n.attrs.float)))
		h.WriteString(n.attrs.str)
		putInt(int(n.attrs.dtype))
	}
	for _, sl := range r.slots {
		if sl.node == nil {
			putInt(-2) // an error
			continue
		}
		walkPostOrder(sl.node, func(n *node) bool { _, seen := index[n]; return seen }, hashNode)
		putInt(index[sl.node])
	}
	return h.Sum64()
}

var recordingSeed = maphash.MakeSeed()

// collectTrace builds the program of a recording's live slots.
func collectTrace(r *recording) *trace {
	tr := &trace{device: r.device, index: map[*node]int{}}
	outputIndex := map[*node]int{}
	for i, sl := range r.slots {
		if !r.liveness.live[i] {
			continue
		}
		if sl.err != nil {
			if tr.err == nil {
				tr.err = sl.err
			}
			continue
		}
		k, ok := outputIndex[sl.node]
		if !ok {
			k = len(tr.outputs)
			outputIndex[sl.node] = k
			tr.outputs = append(tr.outputs, sl.node)
			tr.visit(sl.node)
		}
		if h := sl.handle.Value(); h != nil && h.node == sl.node {
			tr.handles = append(tr.handles, h)
			tr.handleOutput = append(tr.handleOutput, k)
		}
	}
	if !r.liveness.hasProgram {
		r.liveness.program, r.liveness.hasProgram = tr.computeFingerprint(), true
	}
	tr.fingerprint = r.liveness.program
	return tr
}

// visit appends n and everything it depends on, in post-order.
func (tr *trace) visit(root *node) {
	walkPostOrder(root, func(n *node) bool { _, done := tr.index[n]; return done }, func(n *node) {
		tr.index[n] = len(tr.nodes)
		tr.nodes = append(tr.nodes, n)
		if n.isInput() {
			tr.params = append(tr.params, n)
		}
	})
}

// walkPostOrder calls emit on root and everything it depends on, inputs
// first, skipping nodes done reports (emit must make them done). A node
// that reads a buffer is a leaf. Iterative, so deep traces (many steps
// before one MarkStep) cannot overflow the stack.
func walkPostOrder(root *node, done func(*node) bool, emit func(*node)) {
	type frame struct {
		n    *node
		next int
	}
	if done(root) {
		return
	}
	stack := []frame{{n: root}}
	onStack := map[*node]bool{root: true}
	for len(stack) > 0 {
		top := &stack[len(stack)-1]
		if !top.n.isInput() && top.next < len(top.n.inputs) {
			in := top.n.inputs[top.next]
			top.next++
			if !done(in) && !onStack[in] {
				onStack[in] = true
				stack = append(stack, frame{n: in})
			}
			continue
		}
		n := top.n
		stack = stack[:len(stack)-1]
		emit(n)
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
		putInt(int(n.shape.DType))
		putInt(n.shape.Rank())
		for _, d := range n.shape.Dimensions {
			putInt(d)
		}
		if n.isInput() {
			putString(opParameter.name)
			continue
		}
		putString(n.op.name)
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
