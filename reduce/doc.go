// Package reduce names how values combine across replicas and ranks:
// one reduce-op type shared by the in-graph collectives (package xla)
// and the process group's (package ddp), as torch.distributed's ReduceOp
// serves both.
package reduce
