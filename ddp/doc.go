// Package ddp is data-parallel training on XLA devices, the user-facing
// layer on top of the process group (package ddp/dist): the DDP wrapper
// (Wrap: gradients averaged after each Backward, in-graph over local
// replicas and through the host group across processes), DistributedSampler,
// SplitBatch, the launch modes (Main, Run, Spawn: xmp.spawn's one process
// per device or one process for all) and the program's signal policy
// (NotifyContext). Checkpoints are package ddp/checkpoint's; ddprun's
// launcher is ddp/launch, which ddp does not import (Spawn's processes are
// supervised by ddp/internal/procset, as ddprun's workers are).
//
// # Host path
//
// Across processes the step is cut at the gradient all-reduce: each
// replica first reduces in-graph over its process's replicas, MarkStep
// materializes the gradients, local replica 0 copies them into host
// buckets (reverse registration order, as torch), all-reducing each
// through the group as soon as it is full, and every local replica
// uploads the sums; the division and the optimizer update are traced into
// the next program. A compiled step cannot hold the cut: train with lazy
// steps across processes, or use ManualSync.
package ddp
