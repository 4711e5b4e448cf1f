// Package crossing owns how a data-parallel wrapper's values cross
// replicas: the Crossing seam and its implementations, recorded into the
// program for the local replicas of one process (InGraph) or cut at the
// host process group for a job of several processes (HostPath: buckets,
// reverse order, overlapped copies). It knows nothing of modes, samplers
// or checkpoints.
package crossing
