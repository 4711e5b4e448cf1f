// Package mpi is a small typed binding of the MPI C API (Open MPI's
// libmpi, found with pkg-config ompi-c): initialisation, communicators,
// the collectives and point-to-point calls ddp's "mpi" backend maps its
// process-group API onto, their nonblocking MPI_I* forms, and errors as Go
// errors carrying MPI's error string. bfloat16 reduces through
// user-defined MPI operations.
//
// Every file but this one builds only with the build tag mpi, so the
// default build needs no MPI installed.
package mpi
