// Package crossing owns how a data-parallel job's values cross replicas:
// the Crossing seam (means, broadcasts, a sharded optimizer's
// reduce-scatter and all-gather, scalar combines) and its
// implementations, chosen once by ddp.Wrap: recorded into the program for
// the local replicas of one process (InGraph) or cut at the host process
// group for a job of several processes (HostPath: buckets, reverse order,
// overlapped copies). The deterministic mode's sums cross by
// CanonicalSum, over a tree fixed by the micro-shard count. It knows
// nothing of modes, samplers, optimizers or checkpoints.
package crossing
