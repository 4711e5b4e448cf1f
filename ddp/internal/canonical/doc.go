// Package canonical is the deterministic mode's one summation order: the
// binary tree over a global batch's micro-shards, fixed by their count
// alone, the largest subtrees a run of micro-shards can sum on its own,
// and the host's float32 fold of the rest. It knows nothing of devices,
// replicas or processes.
package canonical
