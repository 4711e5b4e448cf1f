package dist

import (
	"context"
	"errors"
	"sync"
)

// The default group, as torch.distributed and smdistributed.dataparallel
// keep one: Init sets it, the package functions use it.
var (
	defaultMu    sync.Mutex
	defaultGroup *ProcessGroup
)

// Init joins the default process group (torch's init_process_group).
func Init(ctx context.Context, o Options) error {
	defaultMu.Lock()
	defer defaultMu.Unlock()
	if defaultGroup != nil {
		return errors.New("ddp: the default process group is already initialized (call Destroy first)")
	}
	g, err := InitProcessGroup(ctx, o)
	if err != nil {
		return err
	}
	defaultGroup = g
	return nil
}

// Default returns the default group, or nil before Init.
func Default() *ProcessGroup {
	defaultMu.Lock()
	defer defaultMu.Unlock()
	return defaultGroup
}

// IsAvailable reports whether distributed support is built in (always).
func IsAvailable() bool { return true }

// IsInitialized reports whether Init has run (and Destroy has not).
func IsInitialized() bool { return Default() != nil }

// Rank returns this process's rank in the default group, or -1.
func Rank() int {
	if g := Default(); g != nil {
		return g.Rank()
	}
	return -1
}

// WorldSize returns the default group's size, or -1.
func WorldSize() int {
	if g := Default(); g != nil {
		return g.WorldSize()
	}
	return -1
}

// LocalRank returns the rank among this host's processes, or -1.
func LocalRank() int {
	if g := Default(); g != nil {
		return g.LocalRank()
	}
	return -1
}

// LocalWorldSize returns the number of processes on this host, or -1.
func LocalWorldSize() int {
	if g := Default(); g != nil {
		return g.LocalWorldSize()
	}
	return -1
}

// Destroy leaves the default group (torch's destroy_process_group).
// Deferred in a goroutine that panics, it records the panic as
// ProcessGroup.Destroy does, and lets it go on.
func Destroy() error {
	p := recover()
	if p != nil {
		defer panic(p)
	}
	defaultMu.Lock()
	g := defaultGroup
	defaultGroup = nil
	defaultMu.Unlock()
	if g == nil {
		return nil
	}
	return g.destroy(p)
}

var errNotInitialized = errors.New("ddp: the default process group is not initialized: call ddp.Init first")

func withDefault(f func(g *ProcessGroup) error) error {
	g := Default()
	if g == nil {
		return errNotInitialized
	}
	return f(g)
}

// AllReduce runs AllReduce on the default group.
func AllReduce(ctx context.Context, buf Buffer, op ReduceOp) error {
	return withDefault(func(g *ProcessGroup) error { return g.AllReduce(ctx, buf, op) })
}

// Broadcast runs Broadcast on the default group.
func Broadcast(ctx context.Context, buf Buffer, root int) error {
	return withDefault(func(g *ProcessGroup) error { return g.Broadcast(ctx, buf, root) })
}

// AllGather runs AllGather on the default group.
func AllGather(ctx context.Context, out, in Buffer) error {
	return withDefault(func(g *ProcessGroup) error { return g.AllGather(ctx, out, in) })
}

// AllToAllSingle runs AllToAllSingle on the default group.
func AllToAllSingle(ctx context.Context, out, in Buffer, outSplits, inSplits []int) error {
	return withDefault(func(g *ProcessGroup) error { return g.AllToAllSingle(ctx, out, in, outSplits, inSplits) })
}

// Barrier runs Barrier on the default group.
func Barrier(ctx context.Context) error {
	return withDefault(func(g *ProcessGroup) error { return g.Barrier(ctx) })
}
