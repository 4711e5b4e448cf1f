// Package ddp owns the distributed layer: the store, rendezvous and process
// group with host collectives, the DistributedDataParallel wrapper, the
// DistributedSampler, checkpoint helpers, the spawn and run launch modes and
// cluster-environment detection; ddp/cmd/ddprun is the torchrun-style CLI.
//
// It knows nothing of PJRT details. Not implemented yet: filled in by the
// ddp issues.
package ddp
