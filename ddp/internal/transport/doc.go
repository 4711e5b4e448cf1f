// Package transport is the seam between the process group (package
// ddp/dist) and what carries its operations: the Transport interface
// (run a call, start one, abort, interrupt, close; an optional inline
// fast path), the Call it takes, the host Buffer and its reduction
// kernels, and the registry transports join by name (the TCP/shared-memory
// one, package ddp/internal/tcp; the MPI one, ddp/internal/mpiengine).
package transport
