package xla

import (
	"errors"
	"fmt"
	"io/fs"
	"log"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/gomlx/go-xla/pkg/pjrt"
	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/distributed"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/xladdp/xladdp/backend"
)

// EnvDebug turns on debug reports (XLADDP_DEBUG=1): why a program recompiled.
const EnvDebug = "XLADDP_DEBUG"

// program is a compiled trace for one set of devices.
type program struct {
	exec *pjrt.LoadedExecutable
	// graph is the GoMLX graph exec was compiled from, kept alive so GoMLX
	// does not free exec; nil for a program loaded from the disk cache.
	graph      *graph.Graph
	numOutputs int
	// outputShapes are what the program computes, for compile-only mode.
	outputShapes []shapes.Shape
	description  []string
	// aliases are the trace's parameter-to-output donation pairs.
	aliases []int
}

type programKey struct {
	fingerprint fingerprint
	devices     string
}

// programCache holds compiled programs by fingerprint and device set, in
// memory and, unless disabled, on disk across runs.
type programCache struct {
	backend *backend.Backend
	disk    *diskCache
	mu      sync.Mutex
	entries map[programKey]*program
	// last is the most recently run program per device set, to explain a
	// recompilation against.
	last map[string]*program
}

func newProgramCache(b *backend.Backend) *programCache {
	c := &programCache{backend: b, entries: map[programKey]*program{}, last: map[string]*program{}}
	if dir := resolveCacheDir(); dir != "" {
		c.disk = &diskCache{dir: dir, identity: b.CacheIdentity(), lowering: loweringIdentity(), xlaFlags: os.Getenv("XLA_FLAGS")}
	}
	return c
}

func debugEnabled() bool { return os.Getenv(EnvDebug) == "1" }

// get returns the program for the replicas' traces (which share one
// fingerprint), compiling it from the first trace on a miss.
func (c *programCache) get(devices []*Device, traces []*trace) (*program, error) {
	key := programKey{fingerprint: traces[0].fingerprint, devices: deviceSetKey(devices)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.entries[key]; ok {
		metrics.cacheHit()
		c.last[key.devices] = p
		return p, nil
	}
	var header cacheHeader
	if c.disk != nil {
		header = c.disk.header(key.fingerprint, deviceNums(devices), traces[0])
	}
	p := c.loadFromDisk(header, devices)
	if p == nil {
		start := time.Now()
		var err error
		p, err = compile(c.backend, devices, traces[0])
		if err != nil {
			return nil, err
		}
		metrics.compiled(time.Since(start))
		c.saveToDisk(header, p)
	}
	p.outputShapes = outputShapesOf(traces[0])
	if prev := c.last[key.devices]; prev != nil && debugEnabled() {
		log.Printf("xladdp: recompiling for %s: %s", key.devices, explainDifference(prev.description, p.description))
	}
	c.entries[key] = p
	c.last[key.devices] = p
	return p, nil
}

// release frees every compiled program, before the client goes.
func (c *programCache) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for key, p := range c.entries {
		if p.graph != nil {
			p.graph.Finalize()
		} else {
			_ = p.exec.Destroy()
		}
		delete(c.entries, key)
	}
	clear(c.last)
}

func deviceSetKey(devices []*Device) string {
	return "devices" + strings.ReplaceAll(fmt.Sprint(deviceNums(devices)), " ", ",")
}

// explainDifference names the first line where two trace listings differ.
func explainDifference(before, after []string) string {
	for i := range min(len(before), len(after)) {
		if before[i] != after[i] {
			return fmt.Sprintf("node %%%d changed from %q to %q (%d nodes before, %d now)",
				i, before[i], after[i], len(before), len(after))
		}
	}
	if len(before) != len(after) {
		common := min(len(before), len(after))
		longer, which := after, "now"
		if len(before) > len(after) {
			longer, which = before, "before"
		}
		return fmt.Sprintf("the trace has %d nodes instead of %d; the first %d are the same; the first extra node (%s) is %%%d %q",
			len(after), len(before), common, which, common, longer[common])
	}
	return "the same nodes produce a different set of outputs (a different set of live tensors)"
}

// compile replays tr into a GoMLX SPMD graph over devices and compiles it.
func compile(b *backend.Backend, devices []*Device, tr *trace) (p *program, err error) {
	rc := &replayContext{trace: tr, values: map[*node]*graph.Node{}, numReplicas: len(devices),
		randomStates: map[*node]*graph.Node{}}
	defer rc.releaseDots()
	defer func() {
		if r := recover(); r != nil {
			at := "while compiling"
			if rc.current != nil {
				at = "replaying " + rc.current.describe(tr.index)
			}
			p, err = nil, fmt.Errorf("xla: building the program for %s failed %s: %v", deviceSetKey(devices), at, r)
		}
	}()
	mesh, err := distributed.NewDeviceMesh([]int{len(devices)}, []string{"replica"})
	if err != nil {
		return nil, err
	}
	g := graph.NewGraph(b.GoMLX(), "xladdp_step")
	if err := g.SetSPMD(mesh); err != nil {
		return nil, err
	}
	assignment := make([]backends.DeviceNum, len(devices))
	for i, d := range devices {
		assignment[i] = backends.DeviceNum(d.num)
	}
	if err := g.SetDeviceAssignment(assignment); err != nil {
		return nil, err
	}
	rc.graph = g
	params := make([]*graph.Node, len(tr.params))
	for i, pn := range tr.params {
		params[i] = graph.Parameter(g, fmt.Sprintf("p%d", i), pn.shape)
		rc.values[pn] = params[i]
		if pn.shape.IsZeroSize() {
			rc.values[pn] = graph.Zeros(g, pn.shape) // see replayEmpty
		}
	}
	for _, n := range tr.nodes {
		if n.isInput() {
			continue
		}
		rc.current = n
		ins := make([]*graph.Node, len(n.inputs))
		for i, x := range n.inputs {
			ins[i] = rc.values[x]
		}
		if n.shape.IsZeroSize() {
			rc.replayEmpty(n, ins)
			continue
		}
		rc.values[n] = n.op.replay(rc, n, ins)
	}
	rc.current = nil
	outs := make([]*graph.Node, len(tr.outputs))
	for i, o := range tr.outputs {
		outs[i] = rc.values[o]
	}
	if err := declareAliases(params, tr.aliases); err != nil {
		return nil, err
	}
	g.Compile(outs...)
	exec, err := b.ExecutableOf(g)
	if err != nil {
		return nil, err
	}
	return &program{exec: exec, graph: g, numOutputs: len(outs), description: tr.describe(), aliases: tr.aliases}, nil
}

// deviceNums returns the devices' numbers: the program's device assignment.
func deviceNums(devices []*Device) []int {
	nums := make([]int, len(devices))
	for i, d := range devices {
		nums[i] = d.num
	}
	return nums
}

// loadFromDisk returns the program cached under want, or nil. A missing,
// corrupt or foreign file (another program, plugin, lowering, XLA_FLAGS,
// or an executable whose outputs differ) is a miss (reported with
// XLADDP_DEBUG=1), never an error: the program is compiled instead and the
// file rewritten.
func (c *programCache) loadFromDisk(want cacheHeader, devices []*Device) *program {
	if c.disk == nil {
		return nil
	}
	h, data, err := c.disk.load(want)
	var exec *pjrt.LoadedExecutable
	if err == nil {
		exec, err = c.backend.LoadExecutable(data, len(devices), deviceNums(devices))
	}
	if err == nil && exec.NumOutputs != want.Outputs {
		err = fmt.Errorf("the executable has %d outputs, the program %d", exec.NumOutputs, want.Outputs)
		_ = exec.Destroy()
	}
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) && debugEnabled() {
			log.Printf("xladdp: persistent cache: ignoring %s: %v", c.disk.path(want), err)
		}
		return nil
	}
	metrics.persistentHit()
	return &program{exec: exec, numOutputs: h.Outputs, description: h.Description}
}

// saveToDisk stores a freshly compiled program; failures only cost the next
// run a compilation, so they are reported with XLADDP_DEBUG=1 only.
func (c *programCache) saveToDisk(h cacheHeader, p *program) {
	if c.disk == nil {
		return
	}
	h.Description = p.description
	data, err := c.backend.SerializeExecutable(p.exec)
	if err == nil {
		err = c.disk.store(h, data)
	}
	if err != nil && debugEnabled() {
		log.Printf("xladdp: persistent cache: not saving %s: %v", c.disk.path(h), err)
	}
}

// replayEmpty replays a node whose result has no elements as a constant,
// whatever the op. It holds no elements, so the constant is exact, and it
// is off every gradient path: the gradient through a value with no
// elements is zero, and GoMLX's VJPs fail to build on zero-size operands
// (the dot VJP broadcasts a 0 axis to 1). A random draw of nothing leaves
// the RNG state as it was.
func (rc *replayContext) replayEmpty(n *node, ins []*graph.Node) {
	rc.values[n] = graph.Zeros(rc.graph, n.shape)
	if n.op == opRandom {
		rc.randomStates[n] = ins[0]
	}
}

// replayContext carries state while a trace replays into a GoMLX graph.
type replayContext struct {
	graph       *graph.Graph
	trace       *trace
	values      map[*node]*graph.Node
	numReplicas int
	current     *node
	// gradients caches, per loss node, the gradient of every node the trace
	// asks a gradient for, computed in one graph.Gradient call.
	gradients map[*node]map[*node]*graph.Node
	// randomStates holds each random draw's advanced RNG state.
	randomStates map[*node]*graph.Node
	// ownGradientDots are the dot_generals whose gradient is dotGeneralGrad.
	ownGradientDots []*graph.Node
}

// gradient returns d(loss)/d(wrt), computing all gradients the trace asks of
// this loss at once so the backward pass is built once.
func (rc *replayContext) gradient(loss, wrt *node) *graph.Node {
	if rc.gradients == nil {
		rc.gradients = map[*node]map[*node]*graph.Node{}
	}
	if byWrt, ok := rc.gradients[loss]; ok {
		return byWrt[wrt]
	}
	var wrts []*node
	seen := map[*node]bool{}
	for _, n := range rc.trace.nodes {
		if n.op.name == gradientOpName && n.inputs[0] == loss && !seen[n.inputs[1]] {
			seen[n.inputs[1]] = true
			wrts = append(wrts, n.inputs[1])
		}
	}
	wrtValues := make([]*graph.Node, len(wrts))
	for i, w := range wrts {
		wrtValues[i] = rc.values[w]
	}
	grads := graph.Gradient(rc.values[loss], wrtValues...)
	byWrt := make(map[*node]*graph.Node, len(wrts))
	for i, w := range wrts {
		byWrt[w] = grads[i]
	}
	rc.gradients[loss] = byWrt
	return byWrt[wrt]
}
