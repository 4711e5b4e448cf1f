package xla

import (
	"fmt"
	"slices"
	"sync/atomic"
	"weak"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/xladdp/xladdp/backend"
)

// Device is one addressable device of an engine, with its own trace.
// A Device is used by one goroutine at a time (one replica).
type Device struct {
	engine *Engine
	num    int
	// group is the set of devices this device's MarkStep meets with.
	group *group
	// stepEpoch counts MarkSteps; parameter nodes are valid for one epoch.
	stepEpoch uint64
	// pending lists, in record order, every handle given a pending value
	// (or an error) since the last MarkStep, with that value: weak, so a
	// handle the program dropped is not kept alive, while the value stays
	// readable for the recording's key (see recording).
	pending []pendingEntry
	// liveness remembers, per recording key, which of the recording's
	// handles were alive when it was first seen (learned with one forced
	// GC), and the program that made; a repeated step needs no collection.
	liveness map[uint64]*livenessEntry
	// gradLeaves are the handles marked RequiresGrad.
	gradLeaves []weak.Pointer[Tensor]
	// rng is the device's random state ([3]uint64 on device).
	rng *Tensor
	// scalars caches uploaded scalar constants by value, so a learning rate
	// is one program input instead of a recompilation.
	scalars map[scalarKey]*deviceData
	// positions caches the replica-index scalar uploaded per group position.
	positions map[int]*deviceData
	// kept are the buffers whose history the last MarkStep kept; the next
	// MarkStep drops them.
	kept []*deviceData
	// lastStep is the last program handed to the device, possibly still
	// running (nil before the first).
	lastStep atomic.Pointer[stepExecution]
	// observer hears the trace: a compiled step's capture while one
	// traces on the device, else lazyMode. replay is set while the device
	// meets its group to run a compiled step's program.
	observer stepObserver
	replay   *replayRequest
	// backwardHooks run at the end of every Backward on the device.
	backwardHooks []*backwardHook
}

// lastStepError waits for the last step handed to the device and returns
// its error, if it failed.
func (d *Device) lastStepError() error {
	if s := d.lastStep.Load(); s != nil {
		return s.wait()
	}
	return nil
}

// pendingEntry is one handle given a pending value or an error.
type pendingEntry struct {
	handle weak.Pointer[Tensor]
	node   *node
	err    error
}

type scalarKey struct {
	dtype DType
	value float64
}

// DefaultSeed is the seed of replica i's random state before the program
// seeds it: fixed, so runs repeat, and distinct per replica. An engine
// seeds its device i with DefaultSeed(i); ddp.Spawn reseeds each replica
// with its global index in the job, so the same program draws the same
// numbers whatever launched it.
func DefaultSeed(i int) int64 { return 0x5eed + int64(i)*1_000_003 }

func newDevice(e *Engine, num int) *Device {
	d := &Device{engine: e, num: num, scalars: map[scalarKey]*deviceData{}, observer: lazyMode{}}
	if err := d.ManualSeed(DefaultSeed(num)); err != nil {
		// Only a broken backend fails a 24-byte upload; report it on first use.
		d.rng = d.errorTensor(graph.RNGStateShape, err)
	}
	return d
}

// Num returns the device's index in the engine (GoMLX's DeviceNum).
func (d *Device) Num() int { return d.num }

// String names the device, e.g. "cpu:1".
func (d *Device) String() string { return fmt.Sprintf("%s:%d", d.engine.backend.Target(), d.num) }

// HasFloat64 reports whether the device computes float64 natively: the
// CPU and CUDA targets do; Neuron's compiler does not.
func (d *Device) HasFloat64() bool {
	t := d.engine.backend.Target()
	return t == backend.CPU || t == backend.CUDA
}

// Engine returns the engine the device belongs to.
func (d *Device) Engine() *Engine { return d.engine }

func (d *Device) epoch() uint64 { return d.stepEpoch }

// ManualSeed resets the device's random state, as torch.manual_seed does:
// the same seed gives the same random numbers on every run.
func (d *Device) ManualSeed(seed int64) error {
	state, err := graph.RNGStateFromSeed(seed)
	if err != nil {
		return fmt.Errorf("xla: seeding %s: %w", d, err)
	}
	data, err := d.upload(state)
	if err != nil {
		return err
	}
	d.rng = d.noteCreated(&Tensor{dev: d, shape: data.shape, data: data})
	return nil
}

// upload moves a host tensor to this device.
func (d *Device) upload(t *tensors.Tensor) (*deviceData, error) {
	release, err := d.engine.enter("host-to-device transfer")
	if err != nil {
		return nil, err
	}
	defer release()
	if err := t.MaterializeOnDevice(d.engine.gomlx, false, compute.DeviceNum(d.num)); err != nil {
		return nil, fmt.Errorf("xla: host-to-device transfer of %s to %s: %w", t.Shape(), d, err)
	}
	metrics.transferToDevice(int64(t.Shape().Memory()))
	d.engine.buffers.made(int64(t.Shape().Memory()))
	return &deviceData{tensor: t, shape: t.Shape()}, nil
}

// trackPending registers a handle that now holds a pending value or an error.
func (d *Device) trackPending(t *Tensor) {
	d.pending = append(d.pending, pendingEntry{handle: weak.Make(t), node: t.node, err: t.err})
}

// newPending returns a handle for a freshly recorded node.
func (d *Device) newPending(n *node) *Tensor {
	t := &Tensor{dev: d, shape: n.shape, node: n}
	d.trackPending(t)
	return t
}

func (d *Device) errorTensor(shape shapes.Shape, err error) *Tensor {
	return &Tensor{dev: d, shape: shape, err: err}
}

// liveGradLeaves returns the RequiresGrad handles still alive.
func (d *Device) liveGradLeaves() []*Tensor {
	d.gradLeaves = slices.DeleteFunc(d.gradLeaves, func(w weak.Pointer[Tensor]) bool { return w.Value() == nil })
	leaves := make([]*Tensor, 0, len(d.gradLeaves))
	for _, w := range d.gradLeaves {
		leaves = append(leaves, w.Value())
	}
	return leaves
}
