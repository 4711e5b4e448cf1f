// Package zero is ZeRO stage 1 for ddp.Wrap, torch's
// ZeroRedundancyOptimizer: the optimizer state and the fp32 master
// weights sharded over the replicas of the job, gradients
// reduce-scattered and parameters all-gathered in Step through the
// wrapper's crossing (in-graph local replicas, processes on the host
// path, or both): it knows nothing of how values cross. It owns the sharded checkpoint format
// (a directory committed atomically as a whole, reloadable at any world
// size: SaveSharded, LoadSharded, which ddp/checkpoint calls) and its export to one file
// (ConsolidateCheckpoint) that checkpoint.Load and torch read, and the
// buddy copies that let a lost node's shards be committed by its
// survivors (KeepBuddyCopies, SalvageShards, AssembleSalvaged, which
// ddp/checkpoint's Salvage and Restore call).
package zero
