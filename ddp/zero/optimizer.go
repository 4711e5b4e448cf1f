package zero

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/ddp/internal/crossing"
	"github.com/xladdp/xladdp/ddp/internal/exchange"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
)

// NewOptimizer builds the optimizer a ZeroRedundancyOptimizer runs on its
// shards: one group per group given to New, same weight decay, its
// parameters this replica's flat master shards. For one group,
// optim.NewAdam(groups[0].Params, cfg); for decay groups,
// optim.NewAdamWGroups(groups, cfg).
type NewOptimizer func(groups []optim.ParamGroup) (optim.Optimizer, error)

// ZeroRedundancyOptimizer is ZeRO stage 1, torch's
// ZeroRedundancyOptimizer over a ddp.DistributedDataParallel module: the
// optimizer state and the master weights are sharded over the replicas
// of the job. The module's parameters are laid end to end in buckets
// (by parameter group and dtype, at most the wrapper's BucketCapMB each),
// each cut into one equal shard per replica (zero-padded when its length
// does not divide). Step reduce-scatters the gradients (each replica
// receives the mean over all replicas of its shard only), updates its
// shard with the inner optimizer, and all-gathers the updated parameters
// into every replica's module: the same update as the plain optimizer
// on averaged gradients, with 1/N of its state per replica. In-graph
// over local replicas (recorded into the step's program), through the
// host process group across processes, and both at once. bfloat16
// parameters keep float32 master shards.
//
// It registers the wrapper's comm hook, so Backward leaves the gradients
// local: Step averages them. Every replica calls each method at the same
// point.
type ZeroRedundancyOptimizer struct {
	ctx      context.Context
	dev      *xla.Device
	params   []nn.Named
	groupOf  []int
	groups   []optim.ParamGroup // weight decays as given; Params unused after construction
	capBytes int
	buckets  []*zeroBucket
	masters  []*xla.Tensor // this replica's shard of each bucket
	inner    optim.Optimizer
	// The job: replica is this replica's global index among replicas;
	// local is the replicas per process; cross how values cross them.
	replica, replicas, local int
	pg                       *dist.ProcessGroup // the job's processes (dist.Current)
	cross                    crossing.Crossing  // the wrapper's
	layout                   string
	clip                     *clipRequest
	lastNorm                 *xla.Tensor
	// deterministic: the wrapper leaves every replica the job's mean
	// gradients (ddp.Deterministic), so Step takes its shard of them.
	deterministic bool
	// module is the wrapper, whose state dict a checkpoint holds (its
	// buffers go with a buddy copy).
	module nn.Module
	// updates counts the Steps (from the step a checkpoint resumed);
	// with buddies on, held keeps the last steps' pieces (buddy.go).
	updates int
	buddies bool
	slots   *buddySlots
	rest    [keptSteps]keptRest
}

// clipRequest is a ClipGradNorm waiting for the next Step.
type clipRequest struct{ maxNorm, normType float64 }

// New shards module's optimizer: groups lists the module's parameters
// with their weight decay (nil: one group of them all), newOptimizer
// builds the optimizer over this replica's shards. Every replica calls it
// at the same point, with the same groups and the same optimizer
// settings: a replica that differs is an error on every replica, naming
// it. Parameters with no elements are left out. ctx bounds the waits of
// Step, as Wrap's does the wrapper's: pass the replica's ctx.
func New(ctx context.Context, module *ddp.DistributedDataParallel, groups []optim.ParamGroup,
	newOptimizer NewOptimizer) (*ZeroRedundancyOptimizer, error) {
	params := parametersOf(module)
	z, err := newZero(ctx, module, params, groups, newOptimizer)
	if err != nil {
		return nil, fmt.Errorf("zero: New on replica %d: %w", globalReplica(params), err)
	}
	return z, nil
}

// parametersOf is the module's parameters with elements, as the wrapper
// keeps them in step.
func parametersOf(module *ddp.DistributedDataParallel) []nn.Named {
	if module == nil {
		return nil
	}
	var out []nn.Named
	for _, p := range nn.NamedParameters(module.Module()) {
		if p.Tensor != nil && p.Tensor.Shape().Size() > 0 {
			out = append(out, p)
		}
	}
	return out
}

// globalReplica is the replica index of the parameters' device in the
// job, for errors.
func globalReplica(params []nn.Named) int {
	if len(params) == 0 {
		return dist.Current().Rank()
	}
	index, count := params[0].Tensor.Device().Replica()
	return dist.Current().Rank()*count + index
}

func newZero(ctx context.Context, module *ddp.DistributedDataParallel, params []nn.Named, groups []optim.ParamGroup,
	newOptimizer NewOptimizer) (*ZeroRedundancyOptimizer, error) {
	switch {
	case module == nil:
		return nil, errors.New("a nil module: wrap the model with ddp.Wrap first")
	case newOptimizer == nil:
		return nil, errors.New("a nil NewOptimizer")
	case len(params) == 0:
		return nil, errors.New("the module has no parameters with elements: nothing to shard")
	}
	if groups == nil {
		groups = []optim.ParamGroup{{Params: tensorsOf(params)}}
	}
	groupOf, err := groupsOf(params, groups)
	if err != nil {
		return nil, err
	}
	dev := params[0].Tensor.Device()
	if dev.Tracing() {
		return nil, errors.New("called inside a compiled step: create the optimizer before compiling")
	}
	z := &ZeroRedundancyOptimizer{ctx: ctx, dev: dev, params: params, groupOf: groupOf,
		capBytes: module.BucketBytes(), cross: module.Collectives(), deterministic: module.Deterministic(), module: module}
	z.groups = make([]optim.ParamGroup, len(groups))
	for i, g := range groups {
		z.groups[i].WeightDecay = g.WeightDecay
	}
	z.pg = dist.Current()
	index, local := dev.Replica()
	z.replica, z.replicas, z.local = z.pg.Rank()*local+index, z.pg.WorldSize()*local, local
	z.buckets = planZeroBuckets(z.params, groupOf, len(groups), z.capBytes, z.replicas)
	if err := z.initMasters(ctx); err != nil {
		return nil, err
	}
	shardGroups := make([]optim.ParamGroup, len(groups))
	for i, g := range groups {
		shardGroups[i].WeightDecay = g.WeightDecay
	}
	for b, bucket := range z.buckets {
		shardGroups[bucket.group].Params = append(shardGroups[bucket.group].Params, z.masters[b])
	}
	if z.inner, err = newOptimizer(shardGroups); err != nil {
		return nil, fmt.Errorf("building the optimizer over the shards: %w", err)
	}
	if z.inner == nil {
		return nil, errors.New("NewOptimizer returned no optimizer")
	}
	z.layout = zeroLayoutText(z.params, groupOf, groups, z.capBytes, z.inner)
	if err := z.agreeOnLayout(ctx); err != nil {
		return nil, err
	}
	// Backward leaves the gradients local; Step reduce-scatters them.
	if err := module.RegisterCommHook(func(context.Context, []nn.Named) error { return nil }); err != nil {
		return nil, err
	}
	return z, nil
}

// initMasters uploads this replica's shard of every bucket from the
// module's parameters (equal on every replica since Wrap).
func (z *ZeroRedundancyOptimizer) initMasters(ctx context.Context) error {
	if err := z.dev.MarkStep(ctx); err != nil {
		return err
	}
	values := make([][]byte, len(z.params))
	for i, p := range z.params {
		values[i] = make([]byte, p.Tensor.Shape().Memory())
		if err := p.Tensor.CopyBytesTo(ctx, values[i]); err != nil {
			return fmt.Errorf("reading %s: %w", p.Name, err)
		}
	}
	z.masters = make([]*xla.Tensor, len(z.buckets))
	for b, bucket := range z.buckets {
		m, err := xla.FromBytes(z.dev, bucket.masterDType(), []int{bucket.ShardLen(z.replicas)},
			shardBytes(bucket, values, z.replica, z.replicas))
		if err != nil {
			return fmt.Errorf("uploading the master shard of bucket %d: %w", b, err)
		}
		if err := m.SetRequiresGrad(true); err != nil {
			return err
		}
		z.masters[b] = m
	}
	return nil
}

// agreeOnLayout compares the layout (parameters, groups, optimizer) with
// every local replica and every rank.
func (z *ZeroRedundancyOptimizer) agreeOnLayout(ctx context.Context) error {
	timeout := exchange.Timeout(z.pg)
	texts, err := exchange.GatherLocal(ctx, z.dev, timeout, "comparing the optimizer layout", z.layout)
	if err != nil {
		return err
	}
	index, _ := z.dev.Replica()
	for i, text := range texts {
		if text != z.layout {
			return fmt.Errorf("%s: local replicas %d and %d differ: %s", zeroMismatch.Summary, i, index,
				firstDifference(text, z.layout))
		}
	}
	_, err = exchange.HostOnce(ctx, z.dev, timeout, "comparing the optimizer layout", func() (struct{}, error) {
		_, err := z.checkLayout(ctx)
		return struct{}{}, err
	})
	return err
}

var zeroMismatch = exchange.Mismatch{Summary: "ranks built ZeroRedundancyOptimizer differently (same model, groups and optimizer " +
	"settings on every rank?)", Item: "line"}

// firstDifference names the first line where a and b differ.
func firstDifference(a, b string) string {
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < max(len(la), len(lb)); i++ {
		if x, y := exchange.LineAt(la, i), exchange.LineAt(lb, i); x != y {
			return fmt.Sprintf("%q against %q", x, y)
		}
	}
	return "no line differs"
}

// ClipGradNorm makes the next Step clip the averaged gradients to a total
// norm of maxNorm before the update, torch's clip_grad_norm_ over the
// whole model (the norm is over every shard of every replica; see
// optim.ClipGradNorm). Call it where the plain loop calls
// optim.ClipGradNorm, between Backward and Step; LastGradNorm returns the
// norm once Step ran.
func (z *ZeroRedundancyOptimizer) ClipGradNorm(maxNorm, normType float64) error {
	if !(maxNorm >= 0) || math.IsInf(maxNorm, 0) || !(normType > 0) {
		return fmt.Errorf("zero: ClipGradNorm(%g, %g): the max norm must be finite and >= 0, the norm type > 0", maxNorm, normType)
	}
	z.clip = &clipRequest{maxNorm: maxNorm, normType: normType}
	return nil
}

// LastGradNorm is the total gradient norm the last Step clipped by, or nil.
func (z *ZeroRedundancyOptimizer) LastGradNorm() *xla.Tensor { return z.lastNorm }

// Step averages the gradients shard by shard, updates this replica's
// shard and gathers the updated parameters into the module. Across
// processes it runs the step's program first (the gradients must reach
// the host) and the update after it (the updated shards must too), so it
// cannot run inside a compiled step there.
func (z *ZeroRedundancyOptimizer) Step() error {
	clip := z.clip
	z.clip = nil
	z.lastNorm = nil
	have, err := z.gradientsPresent()
	if err != nil || !have {
		if err == nil {
			err = z.inner.Step() // counts the step, as the plain optimizer does
		}
		if err == nil {
			err = z.keep(z.ctx)
		}
		return err
	}
	ctx := z.ctx
	if z.deterministic {
		return z.deterministicStep(ctx, clip)
	}
	shards, err := z.cross.ReduceScatter(ctx, z.dev, z.params, z.flats())
	if err != nil {
		return fmt.Errorf("zero: ZeroRedundancyOptimizer.Step on replica %d: %w", z.replica, err)
	}
	for b, m := range z.masters {
		if err := m.SetGrad(shards[b].Cast(m.DType())); err != nil {
			return err
		}
	}
	if clip != nil {
		if z.lastNorm, err = optim.ClipGradNormAcross(z.masters, clip.maxNorm, clip.normType, z.combineNorm); err != nil {
			return fmt.Errorf("zero: ZeroRedundancyOptimizer.Step on replica %d: clipping: %w", z.replica, err)
		}
	}
	if err := z.inner.Step(); err != nil {
		return err
	}
	return z.keepAndGather(ctx)
}

// keepAndGather hands the step's buddy copies over, then gathers the
// updated parameters into the module.
func (z *ZeroRedundancyOptimizer) keepAndGather(ctx context.Context) error {
	if err := z.keep(ctx); err != nil {
		return fmt.Errorf("zero: ZeroRedundancyOptimizer.Step on replica %d: %w", z.replica, err)
	}
	if err := z.gather(ctx); err != nil {
		return fmt.Errorf("zero: ZeroRedundancyOptimizer.Step on replica %d: %w", z.replica, err)
	}
	return nil
}

// gradientsPresent reports whether the module's parameters have
// gradients: all or none, since a bucket is reduced whole.
func (z *ZeroRedundancyOptimizer) gradientsPresent() (bool, error) {
	with := -1
	for i, p := range z.params {
		if p.Tensor.Grad() == nil {
			continue
		}
		with = i
	}
	if with < 0 {
		return false, nil
	}
	for _, p := range z.params {
		if p.Tensor.Grad() == nil {
			return false, fmt.Errorf("zero: ZeroRedundancyOptimizer.Step on replica %d: %s has no gradient but %s has: "+
				"a sharded optimizer updates every parameter; wrap with ddp.FindUnusedParameters() so unused ones get zeros",
				z.replica, p.Name, z.params[with].Name)
		}
	}
	return true, nil
}

// combineNorm sums (or takes the largest of) every replica's partial
// gradient norm.
func (z *ZeroRedundancyOptimizer) combineNorm(partial *xla.Tensor, largest bool) (*xla.Tensor, error) {
	op := xla.ReduceSum
	if largest {
		op = xla.ReduceMax
	}
	return z.cross.CombineScalar(z.ctx, z.dev, partial, op)
}

// ZeroGrad drops the module's gradients and the shards'.
func (z *ZeroRedundancyOptimizer) ZeroGrad() {
	for _, p := range z.params {
		p.Tensor.ZeroGrad()
	}
	z.inner.ZeroGrad()
}

// LR and SetLR are the inner optimizer's (schedulers drive them).
func (z *ZeroRedundancyOptimizer) LR() float64      { return z.inner.LR() }
func (z *ZeroRedundancyOptimizer) SetLR(lr float64) { z.inner.SetLR(lr) }

// Hyperparameters are the inner optimizer's settings.
func (z *ZeroRedundancyOptimizer) Hyperparameters() map[string]float64 {
	return z.inner.Hyperparameters()
}

// State is this replica's part of the state: the inner optimizer's state
// over the shards ("step", "state.<bucket>.exp_avg", ...) and the master
// shards ("master.<bucket>"). Save it with checkpoint.Save, which
// writes every replica's.
func (z *ZeroRedundancyOptimizer) State() []nn.Named {
	out := append([]nn.Named(nil), z.inner.State()...)
	for b, m := range z.masters {
		out = append(out, nn.Named{Name: fmt.Sprintf("master.%d", b), Tensor: m})
	}
	return out
}

// StateShard says which shard State holds (optim.ShardedOptimizer).
func (z *ZeroRedundancyOptimizer) StateShard() (replica, replicas int) { return z.replica, z.replicas }

// Inner returns the optimizer running on the shards.
func (z *ZeroRedundancyOptimizer) Inner() optim.Optimizer { return z.inner }

// ShardBytes measures this replica's share, from its live device
// buffers: the inner optimizer's state (Adam's moments and step) and the
// master shards.
func (z *ZeroRedundancyOptimizer) ShardBytes(ctx context.Context) (state, masters int64, err error) {
	for _, s := range z.inner.State() {
		n, err := s.Tensor.DeviceBytes(ctx)
		if err != nil {
			return 0, 0, fmt.Errorf("zero: measuring %s: %w", s.Name, err)
		}
		state += n
	}
	for _, m := range z.masters {
		n, err := m.DeviceBytes(ctx)
		if err != nil {
			return 0, 0, err
		}
		masters += n
	}
	return state, masters, nil
}
