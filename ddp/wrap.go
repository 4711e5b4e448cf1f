package ddp

import (
	"context"
	"errors"
	"fmt"
	"github.com/xladdp/xladdp/ddp/internal/crossing"
	"math"

	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
)

// WrapOption configures Wrap (Options configure the process group); the
// defaults are torch's.
type WrapOption func(*wrapConfig)

type wrapConfig struct {
	manualSync       bool
	findUnused       bool
	bucketCapMB      float64
	asView           bool
	broadcastBuffers bool
	torchNames       bool
	collectives      ReplicaCollectives
	deterministic    *deterministicConfig
	// batch is the program's step, from Worker.Wrap or Deterministic:
	// what NewFeed reads the data by.
	batch Batch
}

// DefaultBucketCapMB is torch's bucket_cap_mb.
const DefaultBucketCapMB = 25

// firstBucketBytes is torch's first bucket (_DEFAULT_FIRST_BUCKET_BYTES):
// small, so the first all-reduce starts early.
const firstBucketBytes = 1 << 20

// maxBucketCapMB bounds BucketCapMB (a bucket is one host buffer).
const maxBucketCapMB = 1 << 14

// FindUnusedParameters is torch's find_unused_parameters: a parameter
// that got no gradient in a Backward still takes part in the averaging,
// with a zero gradient, so replicas whose steps use different layers stay
// in step.
func FindUnusedParameters() WrapOption { return func(c *wrapConfig) { c.findUnused = true } }

// ManualSync leaves Backward's gradients local: the caller averages them
// with SyncGradients when it chooses. Across processes, that is how
// compiled steps train: the host all-reduce cannot sit inside one
// program, so compile the forward and backward as one step and the
// optimizer update as another, and call SyncGradients between their Runs.
// SyncGradients then also broadcasts the buffers, which Forward does
// otherwise.
func ManualSync() WrapOption { return func(c *wrapConfig) { c.manualSync = true } }

// BucketCapMB sets how many MiB of gradients go to the host in one
// all-reduce across processes (torch's bucket_cap_mb, default 25).
func BucketCapMB(mb float64) WrapOption { return func(c *wrapConfig) { c.bucketCapMB = mb } }

// GradientAsBucketView is torch's gradient_as_bucket_view: gradients are
// copied from the device straight into the bucket buffers; with every
// rank on one host, those are shared memory (ProcessGroup.SharedBuffer),
// so the all-reduce runs in place with no staging copy.
func GradientAsBucketView() WrapOption { return func(c *wrapConfig) { c.asView = true } }

// BroadcastBuffers is torch's broadcast_buffers (default on): at each
// Forward, the buffers (BatchNorm's running statistics) take global
// replica 0's values. Across processes a step's exchange ends with that
// broadcast and the next Forward does not repeat it: the same values,
// held once the step completed (completed_buffers.go).
func BroadcastBuffers(on bool) WrapOption { return func(c *wrapConfig) { c.broadcastBuffers = on } }

// TorchStateDictNames names the tensors as torch's DDP module does,
// "module.fc1.weight" rather than "fc1.weight", so state dicts saved from
// a wrapped torch model load as they are.
func TorchStateDictNames() WrapOption { return func(c *wrapConfig) { c.torchNames = true } }

// WithCollectives replaces Wrap's choice of how values cross replicas
// (see ReplicaCollectives).
func WithCollectives(rc ReplicaCollectives) WrapOption {
	return func(c *wrapConfig) { c.collectives = rc }
}

// ReplicaCollectives is how a wrapped module's values cross replicas:
// Wrap picks InGraph for a job of one process, the host path across
// processes; every replica calls each method at the same point.
type ReplicaCollectives = crossing.Crossing

// InGraph crosses replicas with XLA collectives over the device's replica
// group (xla.Device.Replica), recorded into the step's program.
type InGraph = crossing.InGraph

// HostPathStats is where the host path's time goes on this replica: the
// gradients' program, their copies, the all-reduce wait, the upload.
type HostPathStats = crossing.Stats

// DistributedDataParallel is a module whose gradients are averaged over
// every replica of the job after each Backward, as torch's
// DistributedDataParallel does: the training loop is the single-device one.
type DistributedDataParallel struct {
	module      nn.Module
	cfg         wrapConfig
	ctx         context.Context
	dev         *xla.Device
	params      []nn.Named
	paramSet    map[*xla.Tensor]struct{} // the tensors of params, for the backward hook
	buffers     []nn.Named
	collectives ReplicaCollectives
	noSync      bool
	syncs       int
	closed      bool
	unhook      func()
	// hook replaces the averaging of the gradients (RegisterCommHook).
	hook CommHook
	// mode is how steps combine the gradients, chosen once in Wrap.
	mode stepMode
	// completed are the buffers' values as of the last combined step
	// (completed_buffers.go); synced says that the exchange just gave
	// every replica global replica 0's, so the next Forward need not.
	completed []*xla.Tensor
	synced    bool
}

// Wrap returns module wrapped for data-parallel training over every
// replica of the job: the local replicas of xla.Engine.RunReplicas (one
// device alone is a group of one) times the processes of the default
// process group. Every replica calls Wrap on its own copy
// of the model, on its device:
//   - the parameters and buffers take global replica 0's values, so every
//     replica starts equal even if they were initialized differently;
//   - after each Backward, every gradient of the module is replaced by its
//     mean over all replicas, unless inside NoSync: in-graph (an XLA
//     all-reduce) over local replicas, then, when the job spans
//     processes, through the host process group (see ReplicaCollectives);
//   - at each Forward, the buffers are broadcast from replica 0 first,
//     unless BroadcastBuffers(false).
//
// ctx bounds the waits the wrapper makes on its own (the broadcast here
// and, across processes, each gradient all-reduce inside Backward): pass
// the replica's ctx. All of the module's tensors must be on one device.
// Close removes the gradient hook.
func Wrap(ctx context.Context, module nn.Module, opts ...WrapOption) (*DistributedDataParallel, error) {
	cfg := wrapConfig{bucketCapMB: DefaultBucketCapMB, broadcastBuffers: true}
	for _, o := range opts {
		o(&cfg)
	}
	if module == nil {
		return nil, errors.New("ddp: Wrap of a nil module")
	}
	if !(cfg.bucketCapMB > 0 && cfg.bucketCapMB <= maxBucketCapMB) || math.IsNaN(cfg.bucketCapMB) {
		return nil, fmt.Errorf("ddp: BucketCapMB(%v): give a size in MiB above 0 and at most %d (default %d)",
			cfg.bucketCapMB, maxBucketCapMB, DefaultBucketCapMB)
	}
	if err := nn.Err(module); err != nil {
		return nil, fmt.Errorf("ddp: Wrap: the module failed to build: %w", err)
	}
	m := &DistributedDataParallel{module: module, cfg: cfg, ctx: ctx}
	if err := m.collect(); err != nil {
		return nil, err
	}
	if err := checkJobMode(m.dev, cfg.deterministic != nil); err != nil {
		return nil, err
	}
	if err := m.chooseCrossing(dist.Current()); err != nil {
		return nil, err
	}
	if err := m.collectives.BroadcastFromFirst(ctx, m.dev, append(append([]nn.Named(nil), m.params...), m.buffers...)); err != nil {
		return nil, fmt.Errorf("ddp: Wrap: %w", err)
	}
	if err := m.keepCompletedBuffers(ctx); err != nil {
		return nil, err
	}
	// The one place the step mode is chosen (stepMode).
	m.mode = plainMode{}
	if cfg.deterministic != nil {
		d, err := newDeterministic(*cfg.deterministic, m.dev)
		if err != nil {
			return nil, err // each says "ddp: " and what of the mode
		}
		m.mode = d
	}
	m.paramSet = make(map[*xla.Tensor]struct{}, len(m.params))
	for _, p := range m.params {
		m.paramSet[p.Tensor] = struct{}{}
	}
	m.unhook = m.dev.RegisterBackwardHook(m.averageGradients)
	return m, nil
}

// collect takes the module's parameters and buffers with values, all on
// one device, which becomes the wrapper's.
func (m *DistributedDataParallel) collect() error {
	params, buffers := nn.NamedParameters(m.module), nn.NamedBuffers(m.module)
	named := append(params, buffers...)
	for i, n := range named {
		if n.Tensor == nil {
			return fmt.Errorf("ddp: Wrap: %s is nil", n.Name)
		}
		switch {
		case m.dev == nil:
			m.dev = n.Tensor.Device()
		case n.Tensor.Device() != m.dev:
			return fmt.Errorf("ddp: Wrap: %s is on %s but %s is on %s: move the module to one device first",
				n.Name, n.Tensor.Device(), named[0].Name, m.dev)
		}
		if n.Tensor.Shape().Size() == 0 {
			continue // no values to keep in step, and never a gradient
		}
		if i < len(params) {
			m.params = append(m.params, n)
		} else {
			m.buffers = append(m.buffers, n)
		}
	}
	if m.dev == nil {
		return errors.New("ddp: Wrap: the module has no parameters or buffers to keep in step")
	}
	return nil
}

// chooseCrossing is how values cross replicas, chosen once: the one
// given (WithCollectives), else in-graph for a job of one process and the
// host path across processes.
func (m *DistributedDataParallel) chooseCrossing(g *dist.ProcessGroup) error {
	m.collectives = m.cfg.collectives
	switch m.collectives.(type) {
	case InGraph, *InGraph:
		if g.WorldSize() > 1 {
			// Its all-reduce would average this process's replicas only:
			// the ranks would drift apart without an error.
			_, local := m.dev.Replica()
			return fmt.Errorf("ddp: Wrap on rank %d: WithCollectives(InGraph{}) averages over this process's %d local replica(s) only, "+
				"but the job spans %d processes: leave the default (Wrap crosses processes on the host path)", g.Rank(), local, g.WorldSize())
		}
	case nil:
		m.collectives = InGraph{}
		if g.WorldSize() > 1 {
			bucket := int(m.cfg.bucketCapMB * (1 << 20))
			m.collectives = crossing.NewHostPath(g, min(firstBucketBytes, bucket), bucket, m.cfg.asView)
		}
	}
	return nil
}

// averageGradients is the backward hook: after a Backward that gave the
// module's parameters gradients, each of them becomes its mean over the
// replicas. A Backward that reached none of them (an unwrapped model, a
// saliency map) syncs nothing, as torch's per-parameter hooks never fire.
func (m *DistributedDataParallel) averageGradients(leaves []*xla.Tensor) error {
	if m.noSync || m.cfg.manualSync || !m.mode.averagesAfterBackward() || !m.ownsAny(leaves) {
		return nil
	}
	return m.SyncGradients(m.ctx)
}

// ownsAny reports whether one of leaves is a parameter of the module.
func (m *DistributedDataParallel) ownsAny(leaves []*xla.Tensor) bool {
	for _, l := range leaves {
		if _, ok := m.paramSet[l]; ok {
			return true
		}
	}
	return false
}

// SyncGradients replaces each of the module's gradients by its mean over
// every replica now; Backward does this by itself unless the module was
// wrapped with ManualSync. Every replica calls it at the same point.
// Across processes it reads the gradients, so it cannot run inside a
// compiled step: call it between Runs.
func (m *DistributedDataParallel) SyncGradients(ctx context.Context) error {
	if err := m.mode.syncRefusal(); err != nil {
		return err
	}
	var withGrad []nn.Named
	for _, p := range m.params {
		if p.Tensor.Grad() == nil {
			if !m.cfg.findUnused {
				continue
			}
			if err := p.Tensor.SetGrad(m.dev.Zeros(p.Tensor.DType(), p.Tensor.Dims()...)); err != nil {
				return err
			}
		}
		withGrad = append(withGrad, p)
	}
	if len(withGrad) > 0 {
		var err error
		if m.hook != nil {
			err = m.hook(ctx, withGrad)
		} else {
			err = m.combineGradients(ctx, withGrad)
		}
		if err != nil {
			return err
		}
		m.syncs++
		if err := m.completeBuffers(ctx); err != nil {
			return err
		}
	}
	if m.cfg.manualSync {
		return m.broadcastBuffers(ctx)
	}
	return nil
}

// CommHook takes over what the wrapper does with the gradients after a
// Backward, torch's DDP communication hook: params are the module's
// parameters with a gradient (every one of them with
// FindUnusedParameters, the missing ones zero-filled), in registration
// order, and the hook leaves in each gradient what the optimizer should
// apply. ctx is the one given to Wrap (or to SyncGradients).
type CommHook func(ctx context.Context, params []nn.Named) error

// RegisterCommHook makes hook run where the wrapper would average the
// gradients: after each Backward outside NoSync, or in SyncGradients with
// ManualSync. One hook per wrapper, registered before training. The
// sharded optimizer (package ddp/zero) registers one that leaves the
// gradients local, since its Step reduce-scatters them.
func (m *DistributedDataParallel) RegisterCommHook(hook CommHook) error {
	switch {
	case hook == nil:
		return errors.New("ddp: RegisterCommHook(nil)")
	case m.closed:
		return errors.New("ddp: RegisterCommHook on a closed wrapper: it no longer syncs gradients")
	case m.hook != nil:
		return errors.New("ddp: RegisterCommHook: the wrapper already has a hook (one per wrapper)")
	}
	m.hook = hook
	return nil
}

// BucketBytes is the most bytes of gradients the wrapper reduces as one
// buffer (BucketCapMB).
func (m *DistributedDataParallel) BucketBytes() int { return int(m.cfg.bucketCapMB * (1 << 20)) }

// broadcastBuffers gives every replica global replica 0's buffers, unless
// BroadcastBuffers(false).
func (m *DistributedDataParallel) broadcastBuffers(ctx context.Context) error {
	// A deterministic step leaves every replica the same buffers (the
	// micro-shards' mean), and replicas run unequal micro-shard counts.
	if !m.cfg.broadcastBuffers || len(m.buffers) == 0 || m.closed || !m.mode.broadcastsBuffers() {
		return nil
	}
	if err := m.collectives.BroadcastFromFirst(ctx, m.dev, m.buffers); err != nil {
		return fmt.Errorf("ddp: broadcasting the buffers: %w", err)
	}
	return nil
}

// Forward broadcasts the buffers from replica 0 (unless
// BroadcastBuffers(false), or with ManualSync, where SyncGradients does
// it), then runs the wrapped module.
func (m *DistributedDataParallel) Forward(x *xla.Tensor) *xla.Tensor {
	if synced := m.synced; !m.cfg.manualSync && !synced {
		if err := m.broadcastBuffers(m.ctx); err != nil {
			return xla.Failed(x, err)
		}
		if err := m.keepCompletedBuffers(m.ctx); err != nil {
			return xla.Failed(x, err)
		}
	}
	m.synced = false // the forward moves them again
	return m.module.Forward(x)
}

// NoSync runs fn with gradient averaging off, torch's no_sync(): the
// Backwards inside accumulate local gradients, and the first Backward
// after it averages the accumulated sum.
func (m *DistributedDataParallel) NoSync(fn func() error) error {
	m.noSync = true
	defer func() { m.noSync = false }()
	return fn()
}

// GradientSyncs counts the times this replica averaged its gradients with
// the others: one per step, one per K micro-steps under NoSync.
func (m *DistributedDataParallel) GradientSyncs() int { return m.syncs }

// Module returns the wrapped module (torch's ddp_model.module).
func (m *DistributedDataParallel) Module() nn.Module { return m.module }

// Params, Buffers and Children present the wrapped module's tensors under
// their own names, so state dicts and optimizers see the inner module;
// with TorchStateDictNames, under "module." as torch does.
func (m *DistributedDataParallel) Params() []nn.Named {
	if m.cfg.torchNames {
		return nil
	}
	return m.module.Params()
}

func (m *DistributedDataParallel) Buffers() []nn.Named {
	if m.cfg.torchNames {
		return nil
	}
	return m.module.Buffers()
}

func (m *DistributedDataParallel) Children() []nn.NamedModule {
	if m.cfg.torchNames {
		return []nn.NamedModule{{Name: "module", Module: m.module}}
	}
	return m.module.Children()
}

// Collectives is how this wrapper's values cross replicas, chosen once in
// Wrap: a sharded optimizer over the module crosses through it too.
func (m *DistributedDataParallel) Collectives() ReplicaCollectives { return m.collectives }

// CombinedRNGStates is every replica's random state (process rank, then
// local replica) as of the last step whose gradients were combined across
// processes on the host path; nil elsewhere. checkpoint.Salvage commits
// them when a peer is lost.
func (m *DistributedDataParallel) CombinedRNGStates() [][]byte {
	if h, ok := m.collectives.(*crossing.HostPath); ok {
		return h.CombinedRNGStates()
	}
	return nil
}

// HostPathStats returns where the cross-process gradient averaging spent
// its time on this replica so far; zero when the job is one process.
func (m *DistributedDataParallel) HostPathStats() HostPathStats {
	if h, ok := m.collectives.(*crossing.HostPath); ok {
		return h.Stats()
	}
	return HostPathStats{}
}

// Close stops averaging: the module trains locally from then on.
func (m *DistributedDataParallel) Close() {
	if m.closed {
		return
	}
	m.closed = true
	m.unhook()
}
