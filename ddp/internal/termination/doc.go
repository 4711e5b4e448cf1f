// Package termination says who ends the process on SIGTERM. By default
// the process group (package ddp/dist) does on the mpi backend, where
// SIGTERM is how mpirun ends the ranks: it writes the flight record and
// lets SIGTERM kill the process. A ddp.Checkpointer holds termination
// while it lives: SIGTERM is then a preemption notice, and the ranks
// checkpoint at the end of their step and exit themselves.
package termination
