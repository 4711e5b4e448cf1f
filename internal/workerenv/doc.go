// Package workerenv owns the worker environment: the variables through
// which a launcher (ddprun, torchrun, mpirun, ddp.Spawn's process mode)
// tells a worker its place in the job, spelled here and nowhere else.
// Parse reads them from a getenv into a World; World.Environ renders a
// World for a child process. Readers and writers across the repository
// (ddp, ddp/launch, neuron, the examples) go through it, so a variable
// added or renamed changes in one place.
package workerenv
