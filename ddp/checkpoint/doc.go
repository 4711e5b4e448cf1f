// Package checkpoint is the one door to saving and resuming a
// data-parallel job: Save and Load of an optim.Checkpoint (model,
// optimizer, step, epoch and every replica's random state) on every
// replica at once, SaveStateDict for torch, and the Checkpointer, which
// saves every few steps off the step (a snapshot on the device written in
// the background) and at once on SIGTERM (preemption: ErrPreempted, exit
// ExitPreempted, resumed by running the job again). Steps is a training
// loop's steps under a Checkpointer, the last one committed; Options'
// AddFlags are --checkpoint-dir and --checkpoint-every. The optimizer decides
// the layout: one safetensors file written by rank 0, or for an
// optim.ShardedOptimizer (ddp/zero) a directory of every replica's shard,
// written through the optimizer's SaveSharded and LoadSharded; a
// checkpoint of the other kind is refused, never taken for none. For a
// node joining a running job the Checkpointer holds a step in memory
// instead of a file, and Restore sends it from a live process to every
// rank (hold.go, heal.go).
//
// It knows the process group and the local replicas (to write once and
// agree), not how a sharded optimizer lays out its shards, nor launchers.
package checkpoint
