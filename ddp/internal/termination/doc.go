// Package termination is the process's one signal policy. SIGINT ends
// the program (Context cancels). SIGTERM ends it too, unless termination
// is held: a checkpoint.Checkpointer holds it while it lives, and SIGTERM is then
// a preemption notice (a Spot notice, a SageMaker stop, SLURM's --signal)
// on which the ranks finish their step, commit a checkpoint and exit
// themselves, so the context the save runs on must stay live. On the mpi
// backend, where SIGTERM is how mpirun ends the ranks, the process group
// (package ddp/dist) writes the flight record and lets SIGTERM kill the
// process, again unless termination is held. It knows nothing of
// checkpoints, devices or process groups.
package termination
