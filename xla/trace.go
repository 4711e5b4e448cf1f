package xla

import (
	"crypto/sha256"
	"encoding/binary"
	"hash/maphash"
	"io"
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
	// handles are the live handles holding an output; MarkStep settles them.
	handles     []*Tensor
	fingerprint fingerprint
	err         error
	// aliases[i] is the output parameter i may be donated to (-1: none);
	// nil for a lazy step, which donates nothing. Part of the fingerprint.
	aliases []int
}

// setAliases records which outputs the parameters may be donated to and
// makes them part of the program's identity.
func (tr *trace) setAliases(aliases []int) {
	tr.aliases = aliases
	h := sha256.New()
	h.Write(tr.fingerprint[:])
	w := nodeWriter{w: h}
	w.string("aliases")
	for _, j := range aliases {
		w.int(j)
	}
	copy(tr.fingerprint[:], h.Sum(nil))
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
	w := nodeWriter{w: &h}
	index := map[*node]int{}
	for _, sl := range r.slots {
		if sl.node == nil {
			w.int(-1) // an error
			continue
		}
		walkPostOrder(sl.node, func(n *node) bool { _, seen := index[n]; return seen }, func(n *node) {
			index[n] = len(index)
			w.node(n, index)
		})
		w.int(index[sl.node])
	}
	return h.Sum64()
}

var recordingSeed = maphash.MakeSeed()

// collectTrace builds the program of a recording's live slots.
func collectTrace(r *recording) *trace {
	tr := &trace{device: r.device, index: map[*node]int{}}
	isOutput := map[*node]bool{}
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
		if !isOutput[sl.node] {
			isOutput[sl.node] = true
			tr.outputs = append(tr.outputs, sl.node)
			tr.visit(sl.node)
		}
		if h := sl.handle.Value(); h != nil && h.node == sl.node {
			tr.handles = append(tr.handles, h)
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
	w := nodeWriter{w: h}
	for _, n := range tr.nodes {
		w.node(n, tr.index)
	}
	w.int(len(tr.outputs))
	for _, o := range tr.outputs {
		w.int(tr.index[o])
	}
	var fp fingerprint
	copy(fp[:], h.Sum(nil))
	return fp
}

// nodeWriter writes what decides a node's part of a program to a hash:
// shape, op, attributes and inputs by their index; a node that reads a
// buffer as a parameter of its shape. Never buffer values.
type nodeWriter struct {
	w   io.Writer
	buf [8]byte
}

func (nw *nodeWriter) int(v int) {
	binary.LittleEndian.PutUint64(nw.buf[:], uint64(v))
	nw.w.Write(nw.buf[:])
}

func (nw *nodeWriter) string(s string) {
	nw.int(len(s))
	io.WriteString(nw.w, s)
}

func (nw *nodeWriter) node(n *node, index map[*node]int) {
	nw.int(int(n.shape.DType))
	nw.int(n.shape.Rank())
	for _, d := range n.shape.Dimensions {
		nw.int(d)
	}
	if n.isInput() {
		nw.string(opParameter.name)
		return
	}
	nw.string(n.op.name)
	nw.int(len(n.inputs))
	for _, in := range n.inputs {
		nw.int(index[in])
	}
	nw.int(len(n.attrs.ints))
	for _, v := range n.attrs.ints {
		nw.int(v)
	}
	nw.int(int(math.Float64bits(n.attrs.float)))
	nw.string(n.attrs.str)
	nw.int(int(n.attrs.dtype))
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
