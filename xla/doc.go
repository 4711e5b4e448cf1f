// Package xla is xladdp's execution engine: the torch-xla programming model
// in Go. Tensors are lazy, MarkStep cuts the trace, XLA compiles it once
// through PJRT, and every later step runs from cache. It knows nothing of
// processes or sockets (see package ddp). Subpackages hold layers (xla/nn),
// optimizers (xla/optim) and data loading (xla/data).
//
// # Tensors and ops
//
// An Engine wraps an opened backend; Engine.Device(i) is one device with
// its own trace. FromSlice, Device.Zeros/Ones/Full/Arange and the device RNG
// (Device.RandN/RandU, seeded per device, Device.ManualSeed) create tensors.
// Every op records a node and returns at once; nothing runs. Ops validate
// shapes when recorded: a bad op returns a Tensor carrying the error (Err),
// which sticks to everything computed from it and is returned by MarkStep,
// Item and ToHost. Ops never panic on bad input; they panic only on a nil
// operand or an out-of-range Device index (programming errors).
//
// Scalars 0 and 1 are constants in the program; any other scalar (a
// learning rate) is uploaded once per value and fed as an input, so changing
// it does not recompile.
//
// Shapes are checked when recorded (negative, overflowing, or larger than
// MaxTensorBytes is an error). Zero-size tensors are program constants:
// they hold no values, and they are off every gradient path.
//
// # Autodiff
//
// SetRequiresGrad marks leaves; loss.Backward() records, for every live
// leaf the loss depends on, a gradient node that is replayed through GoMLX's
// graph.Gradient (one backward pass per loss), adding to any existing
// gradient until ZeroGrad, as torch does. Assign updates a tensor in place,
// keeping its identity across steps (parameters, optimizer state); Detach
// cuts the gradient (optimizers and running statistics use it).
//
// A value MarkStep computes from RequiresGrad leaves, and that no Backward
// has gone through yet, keeps its recipe until the next MarkStep, so
// reading the loss before Backward still gives the gradient: Backward
// differentiates through the recipe, and the next program recomputes it.
// After a Backward the recipe is dropped, as torch frees a graph, so an
// ordinary loop keeps no previous buffers alive. Backward through a recipe
// that is gone is an error.
//
// # MarkStep
//
// Device.MarkStep (or Replica.MarkStep) honours ctx at every stage (a
// cancelled ctx runs nothing) and runs a full GC, so that tensors the
// program dropped, tracked through weak pointers, are gone and the set of
// outputs does not depend on GC timing; it then walks from the live pending
// tensors, fingerprints the trace (op kinds, attributes, shapes, dtypes and
// input positions, never values), looks the program up by fingerprint and
// device set, compiles only on a miss, executes, and swaps the results into
// the live tensors. Reading a pending value (Item, ToHost, Float32s) forces a
// MarkStep first, like loss.item() in torch-xla. Several steps traced before
// one MarkStep become one program. The forced GC costs ~0.5 ms on a 2-core
// machine (docs/BENCHMARKS.md); tracing several steps per MarkStep
// amortizes it.
//
// # Replicas
//
// Engine.RunReplicas(ctx, n, fn) runs fn once per device 0..n-1 in its own
// goroutine. At each MarkStep the replicas meet; the program must be the
// same on every replica (else every replica gets ErrReplicaMismatch naming
// the replica groups and the first differing node), is compiled once as an
// SPMD program and runs on all n devices. AllReduce (SUM, MEAN, MIN, MAX,
// PRODUCT) lowers to XLA's all-reduce over the device collectives;
// AllGather and ReduceScatter are built from an all-reduce plus a
// per-replica index input, since GoMLX v0.26.0 exposes no native ones. A
// replica that returns an error, panics, or returns while others wait ends
// every replica at once with that cause.
//
// The last replica to arrive collects every trace under the group lock
// and compiles and executes without it, so a waiting replica whose ctx ends
// (or whose wait passes Engine.SetReplicaTimeout) leaves at once and
// breaks the group, naming the missing replicas.
//
// Engine.Close closes the backend: work in flight finishes, compiled
// programs are freed, and later calls fail with backend.ErrClosed.
//
// # Caches and metrics
//
// Compiled programs are cached in memory and, unless XLADDP_CACHE_DIR=off,
// on disk under XLADDP_CACHE_DIR (default <user cache dir>/xladdp/xla),
// keyed by everything that decides the executable (fingerprint, inputs and
// outputs, device set, plugin build, the lowering code's identity and
// XLA_FLAGS), written atomically, so a second run of the same program
// compiles nothing; a corrupt, foreign or stale cache file is recompiled.
// GetMetrics and MetricsReport give process-wide counters like torch_xla's
// debug metrics; with XLADDP_DEBUG=1 a recompilation logs the first node
// that changed.
//
// Input buffers are not donated: PJRT reuses a donated buffer only when the
// program declares input/output aliasing, which GoMLX v0.26.0's parameters
// cannot express. Old buffers are freed once their tensors are collected.
//
// GoMLX v0.26.0 workarounds live in ops_nn.go: its convolution gradient
// is wrong for even kernel sizes and fails for padding that reaches the
// kernel size, and it refuses stride with dilation; Conv2d rewrites each
// case exactly.
package xla
