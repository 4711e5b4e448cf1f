// Package exchange holds how the replicas of a job agree, for the
// wrapper (package ddp) and the sharded optimizer (package ddp/zero):
// HostOnce and GatherLocal between the local replicas of one process
// (xla.Engine.RunReplicas), which talk to other processes through local
// replica 0 only; and, across ranks, AllGatherBytes, CheckLayout (one
// fingerprint per rank, and on a mismatch the first line that differs)
// and AgreeOnRankZero. How gradients themselves cross is package
// crossing's.
package exchange
