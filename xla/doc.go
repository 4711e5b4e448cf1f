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
// Literal scalars 0 and 1 (MulScalar(1), AddScalar(0)) are constants in the
// program; any other literal is uploaded once per value and fed as an
// input, as torch-xla treats Python scalars. Device.Hyperparameter is always
// an input, whatever its value: the optimizers feed their learning rate
// through it, so a scheduler that moves it to or from 0 or 1 never
// recompiles. Every scalar use is its own input, so the program's shape
// never depends on two scalars happening to be equal.
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
// # Reading values
//
// Values[T](ctx, t) is how a tensor is read to the host: it runs the
// pending MarkStep if there is one, waits for the value and returns its
// elements as a []T of the tensor's dtype. Item (one element, as float64)
// and Float32s are its shorthands; CopyBytesTo writes the raw bytes into
// a buffer of the caller's without a copy in between (DDP's gradient
// buckets), and Bytes returns them.
//
// # MarkStep
//
// Device.MarkStep (or Replica.MarkStep) honours ctx at every stage (a
// cancelled ctx runs nothing). Its program's outputs are the pending values
// of the tensor handles still alive, and that set must not depend on GC
// timing. The rule: every handle given a pending value since the last
// MarkStep is recorded, with the value, in order (the recording). The
// first time a recording is seen (its key hashes every recorded node and
// which handle holds which, never buffer values), MarkStep forces one GC,
// so dropped handles are gone, and remembers which handles were alive; a
// repeated step (the same recording) reuses that and collects nothing, so
// MarkStep's cost does not grow with the user's heap. A handle that looked
// dropped when its recording was first seen, but is kept in a later run of
// the same step, is left out of the program and stays computable: reading
// it (or using it) computes it from its recipe, from the buffers it was
// recorded on. A recording with an error is always collected, so a dropped
// error tensor never fails a step and a kept one always does. Metrics
// counts the forced collections (Collections).
//
// The trace is fingerprinted (op kinds, attributes, shapes, dtypes and input
// positions, never values), the program is looked up by fingerprint and
// device set, compiled only on a miss, and handed to the devices: MarkStep
// returns without waiting for it, as torch-xla and JAX dispatch, so tracing
// the next step overlaps this one's execution (when the plugin executes
// asynchronously: GPU and Neuron always, the CPU plugin with
// backend.CPUAsync; its default runs the program inside the call). Each
// computed value's node holds its buffer, so later traces read it as an
// input. Reading a value
// (Item, ToHost, Float32s) waits for the buffer it reads and forces a
// MarkStep first if the value is pending, like loss.item() in torch-xla.
// The next MarkStep waits for the previous step before running its own; a
// step that fails while running is reported there or at the read, naming
// the step. Several steps traced before one MarkStep become one program.
//
// # Compiled steps
//
// Compile(fn) is torch_xla.compile / jax.jit: CompiledStep.Run traces fn
// once per signature (argument shapes, the replica group, and whether the
// gradients fn looks at before replacing them exist), then runs the
// cached program on the current buffers without running fn's Go code.
// From the trace it knows where each input comes from (an argument, a
// tensor fn reached, the RNG, a gradient) and which tensors hold each
// output, and it updates those in place, so parameters, optimizer state,
// the RNG and gradients behave as in lazy mode; results are fresh tensors
// per call. Under RunReplicas every replica's Run meets the others' as
// MarkStep does. Go values fn reads are frozen at the trace (hold what
// changes in a tensor: the optimizers keep their learning rate on the
// device), and reading a value inside fn is an error.
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
// per-replica index input, since GoMLX (v0.28.16's compute.CollectiveOps)
// exposes no native ones. A
// replica that returns an error, panics, or returns while others wait ends
// every replica at once with that cause.
//
// The last replica to arrive collects every trace under the group lock
// and compiles and executes without it, so a waiting replica whose ctx ends
// (or whose wait passes Engine.SetReplicaTimeout) leaves at once and
// breaks the group, naming the missing replicas.
//
// Engine.Close closes the backend: work in flight (a running step
// included) finishes, compiled programs are freed, and later calls fail
// with backend.ErrClosed.
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
// A device buffer is freed when Go collects the Tensor holding it, and Go
// paces its collections by the Go heap, which does not count device
// memory; so MarkStep also collects once 256 MiB of buffers (program
// outputs and uploads) were made since the last collection
// (Metrics.BufferCollections), keeping a step's dropped buffers from piling
// up between Go's own collections.
//
// A compiled step's program declares input/output aliasing for each
// parameter it overwrites (its new value may reuse the old buffer, XLA's
// "may alias"; backend.SetParameterAttribute sets it on the StableHLO
// arguments: GoMLX's parameters take no attributes), and from its second call donates a buffer when the
// tensor it overwrites is the buffer's sole holder (no trace, Assign or
// To took it since the step stored it), so parameters and optimizer
// state update in place. Lazy MarkSteps declare and donate nothing; their
// old buffers are freed once their tensors are collected.
// XLADDP_DONATE=off turns donation off.
//
// GoMLX v0.26.0 workarounds live in ops_nn.go (exact rewrites, kept with
// v0.28.16 without re-testing whether it still needs them): its convolution gradient
// is wrong for even kernel sizes and fails for padding that reaches the
// kernel size, and it refuses stride with dilation; Conv2d rewrites each
// case exactly. Its dot_general gradient materializes a broadcast product
// ([batch, out, in] for a Linear layer's weight); dotgrad.go replaces it,
// for the dots this package builds, with JAX's two dot_generals.
package xla
