// Package xla is xladdp's execution engine: lazy tensors recorded into a
// trace, the MarkStep boundary that fingerprints, compiles once and executes
// the trace through PJRT, the compile cache, execution on one or many local
// devices (replicas), host transfers and metrics. Subpackages hold layers
// (xla/nn), optimizers (xla/optim) and data loading (xla/data).
//
// It knows nothing of processes or sockets; see package ddp for those.
// Not implemented yet: this package is filled in by the lazy tensor issue.
package xla
