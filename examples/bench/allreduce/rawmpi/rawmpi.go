//go:build mpi

// Package rawmpi runs the C timing loop of raw MPI_Allreduce
// (../c/time_allreduce.h) inside a Go process of an mpi-backend job, so
// the benchmark can alternate it with ddp's all-reduce in the same job,
// on the same buffer and thread: their ratio is the Go binding's and the
// group's overhead, free of the job-to-job noise of separate programs.
package rawmpi

/*
#cgo pkg-config: ompi-c
#include "../c/time_allreduce.h"

static double time_world(float *buf, int n) {
	int rank;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	return time_allreduce(buf, n, rank, MPI_COMM_WORLD);
}
*/
import "C"

// TimeAllreduce times raw MPI_Allreduce of buf on MPI_COMM_WORLD as
// time_allreduce.h does and returns the mean seconds per call; every rank
// calls it together. MPI must be initialised (by the mpi backend).
func TimeAllreduce(buf []float32) float64 {
	return float64(C.time_world((*C.float)(&buf[0]), C.int(len(buf))))
}
