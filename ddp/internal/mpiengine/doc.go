// Package mpiengine is the process group's MPI transport, registered as
// "mpi" in programs built with -tags mpi (over the Open MPI binding,
// package ddp/mpi): the ranks come from mpirun, collectives are MPI's
// blocking calls in issue order, Send and Recv are MPI_Isend and
// MPI_Irecv, and a watchdog aborts the job (MPI_Abort) when an operation
// outlives its timeout or a peer that left the group leaves it unable to
// finish, since MPI cannot cancel an operation.
package mpiengine
