// Package training is the training loop a data-parallel program writes once
// for every mode of the job: the Feed (a replica's share of each global
// batch, or its micro-shards in deterministic mode; a step trained in
// that mode) and the Loop (its epochs and steps kept in the job's
// checkpoint directory, resumed where the last run stood at any world
// size). The examples are built on it.
//
// It owns the data position a checkpoint records; it knows nothing of
// how values cross replicas (package ddp) or how checkpoints are laid out
// (ddp/checkpoint, ddp/zero).
package training
