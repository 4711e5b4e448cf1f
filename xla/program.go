package xla

import (
	"context"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/distributed"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/go-xla/pjrt"
	"github.com/gomlx/gomlx/core/graph"

	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/xla/internal/progcache"
)

// EnvCacheDir is where compiled programs persist across runs; "off"
// disables the persistent cache. Default: <user cache dir>/xladdp/xla.
const EnvCacheDir = "XLADDP_CACHE_DIR"

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
	// allReduces counts the program's in-graph all-reduces (Metrics).
	allReduces int
}

// newProgram fills in what a program's description says.
func newProgram(p *program) *program {
	prefix := opAllReduce.name + "("
	for _, line := range p.description {
		if strings.HasPrefix(line, prefix) {
			p.allReduces++
		}
	}
	return p
}

// programCache holds compiled programs by fingerprint and device set, in
// memory and, unless disabled, on disk across runs (package progcache);
// it adds what only xla knows: how a trace is lowered and compiled, and
// why a device set recompiled.
type programCache struct {
	backend *backend.Backend
	// disk keys every program; its Dir ("" when off) keeps them across
	// runs.
	disk     *progcache.Disk
	programs *progcache.Cache[*program]
	mu       sync.Mutex
	// last is the most recently run program per device set, to explain a
	// recompilation against.
	last map[string]*program
	// closing ends, at release, a compilation's wait for another
	// process's (Disk.Lock).
	closing context.Context
	close   context.CancelFunc
	sharing
}

func newProgramCache(b *backend.Backend) *programCache {
	c := &programCache{backend: b, programs: progcache.New[*program](), last: map[string]*program{}}
	c.closing, c.close = context.WithCancel(context.Background())
	c.disk = &progcache.Disk{Dir: progcache.ResolveDir(os.Getenv(EnvCacheDir)), Identity: b.CacheIdentity(),
		Lowering: progcache.LoweringIdentity(), XLAFlags: os.Getenv("XLA_FLAGS")}
	return c
}

func debugEnabled() bool { return os.Getenv(EnvDebug) == "1" }

// get returns the program for the replicas' traces (which share one
// fingerprint). On a miss it is loaded from disk or lowered from the
// first trace here, then compiled by the cache while ctx bounds the wait.
func (c *programCache) get(ctx context.Context, devices []*Device, traces []*trace) (*program, error) {
	tr := traces[0]
	key := progcache.Key{Fingerprint: hex.EncodeToString(tr.fingerprint[:]), Devices: deviceSetKey(devices)}
	p, hit, err := c.programs.Get(ctx, key, func() (func() (*program, error), error) { return c.lower(devices, tr, key.Fingerprint) })
	if err != nil {
		return nil, fmt.Errorf("xla: compiling the program for %s: %w", key.Devices, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if hit {
		metrics.cacheHit()
	} else if prev := c.last[key.Devices]; prev != nil && debugEnabled() {
		// The explanation is a sentence of its own, not a value.
		slog.Info("xladdp: recompiling for " + key.Devices + ": " + explainDifference(prev.description, p.description))
	}
	c.last[key.Devices] = p
	return p, nil
}

// lower is a miss's part on the caller's goroutine, the only one that
// reads the trace: the program from disk, or the graph lowered from tr,
// whose XLA compilation it returns to run on the cache's goroutine.
func (c *programCache) lower(devices []*Device, tr *trace, fingerprint string) (func() (*program, error), error) {
	var inputs []string
	for _, p := range tr.params {
		inputs = append(inputs, p.shape.String())
	}
	header := c.disk.Header(fingerprint, deviceNums(devices), inputs, shapeStrings(tr.outputs))
	outputShapes := outputShapesOf(tr)
	if p := c.loadFromDisk(header, devices, true); p != nil {
		p.outputShapes = outputShapes
		return func() (*program, error) { return p, nil }, nil
	}
	lowered, err := lowerTrace(c.backend, devices, tr)
	if err != nil {
		return nil, err
	}
	return func() (*program, error) {
		// Another process sharing the cache directory may be compiling
		// it: wait for it, then load what it stored. Else another
		// process of the job may be (programs_shared.go).
		unlock := c.lockOnDisk(header)
		defer unlock()
		p := c.loadFromDisk(header, devices, false)
		var done func(file []byte)
		if p == nil {
			p, done = c.fromJob(header, devices)
		}
		if p != nil {
			lowered.rc.releaseOwnGradients()
			lowered.graph.Finalize()
			p.outputShapes = outputShapes
			return p, nil
		}
		start := time.Now()
		p, err := lowered.compile(c.backend)
		if err != nil {
			done(nil)
			return nil, err
		}
		metrics.compiled(time.Since(start))
		p.outputShapes = outputShapes
		done(c.saveToDisk(header, p))
		return p, nil
	}, nil
}

func shapeStrings(nodes []*node) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.shape.String()
	}
	return out
}

// release frees every compiled program, once the compilations in flight
// are done, before the client goes.
func (c *programCache) release() {
	c.close()
	c.programs.Close(func(p *program) {
		if p.graph != nil {
			p.graph.Finalize()
		} else {
			_ = p.exec.Destroy()
		}
	})
	c.mu.Lock()
	defer c.mu.Unlock()
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

// loweredTrace is a trace replayed into a GoMLX SPMD graph, ready for
// XLA; it holds nothing of the trace.
type loweredTrace struct {
	graph       *graph.Graph
	outputs     []*graph.Node
	rc          *replayContext
	description []string
	aliases     []int
	devices     string
}

// lowerTrace replays tr into a GoMLX SPMD graph over devices.
func lowerTrace(b *backend.Backend, devices []*Device, tr *trace) (lt *loweredTrace, err error) {
	rc := &replayContext{trace: tr, values: map[*node]*graph.Node{}, numReplicas: len(devices),
		randomStates: map[*node]*graph.Node{}, channelsLast: map[*graph.Node]*graph.Node{},
		widenBFloat16Dots: b.Target() == backend.CPU}
	defer func() {
		if r := recover(); r != nil {
			at := "while lowering"
			if rc.current != nil {
				at = "replaying " + rc.current.describe(tr.index)
			}
			rc.releaseOwnGradients()
			lt, err = nil, fmt.Errorf("xla: building the program for %s failed %s: %v", deviceSetKey(devices), at, r)
		} else if err != nil {
			rc.releaseOwnGradients()
		}
	}()
	g, err := newReplicaGraph(b, devices)
	if err != nil {
		return nil, err
	}
	rc.graph = g
	params := rc.declareParams(tr)
	rc.replayNodes(tr)
	outs := make([]*graph.Node, len(tr.outputs))
	for i, o := range tr.outputs {
		outs[i] = rc.values[o]
	}
	if err := declareAliases(params, tr.aliases); err != nil {
		return nil, err
	}
	// The compilation reads none of the trace: drop it from the replay.
	rc.trace, rc.values, rc.randomStates = nil, nil, nil
	return &loweredTrace{graph: g, outputs: outs, rc: rc, description: tr.describe(), aliases: tr.aliases,
		devices: deviceSetKey(devices)}, nil
}

// newReplicaGraph is an SPMD graph over devices, one replica each.
func newReplicaGraph(b *backend.Backend, devices []*Device) (*graph.Graph, error) {
	mesh, err := distributed.NewDeviceMesh([]int{len(devices)}, []string{"replica"})
	if err != nil {
		return nil, err
	}
	g := graph.NewGraph(b.Programs(), "xladdp_step")
	if err := g.SetSPMD(mesh); err != nil {
		return nil, err
	}
	assignment := make([]compute.DeviceNum, len(devices))
	for i, d := range devices {
		assignment[i] = compute.DeviceNum(d.num)
	}
	if err := g.SetDeviceAssignment(assignment); err != nil {
		return nil, err
	}
	return g, nil
}

// declareParams declares the graph's parameters, one per parameter node
// of tr, and returns them.
func (rc *replayContext) declareParams(tr *trace) []*graph.Node {
	params := make([]*graph.Node, len(tr.params))
	for i, pn := range tr.params {
		params[i] = graph.Parameter(rc.graph, fmt.Sprintf("p%d", i), pn.shape)
		rc.values[pn] = params[i]
		if pn.shape.IsZeroSize() {
			rc.values[pn] = graph.Zeros(rc.graph, pn.shape) // see replayEmpty
		}
	}
	return params
}

// replayNodes replays tr's operations into the graph in order, with
// rc.current the one replaying (for lowerTrace's panic message).
func (rc *replayContext) replayNodes(tr *trace) {
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
		if v := rc.replayChannelsLast(n, ins); v != nil {
			rc.values[n] = v
			continue
		}
		rc.values[n] = n.op.replay(rc, n, ins)
	}
	rc.current = nil
}

// compile has XLA compile the lowered graph.
func (lt *loweredTrace) compile(b *backend.Backend) (p *program, err error) {
	defer lt.rc.releaseOwnGradients()
	defer func() {
		if r := recover(); r != nil {
			p, err = nil, fmt.Errorf("xla: compiling the program for %s failed: %v", lt.devices, r)
		}
	}()
	if err := lt.graph.Compile(lt.outputs...); err != nil {
		return nil, fmt.Errorf("xla: compiling the program for %s: %w", lt.devices, err)
	}
	exec, err := b.ExecutableOf(lt.graph)
	if err != nil {
		return nil, err
	}
	return newProgram(&program{exec: exec, graph: lt.graph, numOutputs: len(lt.outputs), description: lt.description, aliases: lt.aliases}), nil
}

// deviceNums returns the devices' numbers: the program's device assignment.
func deviceNums(devices []*Device) []int {
	nums := make([]int, len(devices))
	for i, d := range devices {
		nums[i] = d.num
	}
	return nums
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
	// channelsLast maps a rank-4 NCHW node to the NHWC node it transposes
	// (channels_last.go).
	channelsLast map[*graph.Node]*graph.Node
	// ownGradientNodes are the nodes whose gradient rule is replay's own
	// (owngrad.go).
	ownGradientNodes []*graph.Node
	// widenBFloat16Dots computes bf16 dots as float32 dots of the widened
	// operands, rounded to bf16 (dotgrad.go): on XLA's CPU backend.
	widenBFloat16Dots bool
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
