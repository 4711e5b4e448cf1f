/* Raw MPI_Allreduce from C, timed exactly as examples/bench/allreduce
 * times ddp's all-reduce (time_allreduce.h). Rank 0 prints one JSON line
 * per size:
 * {"Bytes": N, "Seconds": mean seconds per all-reduce}. With
 * XLADDP_BENCH_MPI_THREADS=multiple it initialises MPI as ddp's mpi backend
 * does, asking for MPI_THREAD_MULTIPLE.
 *
 *   mpicc -O2 -o mpi_allreduce mpi_allreduce.c
 *   mpirun -np 2 ./mpi_allreduce 4096 1048576 67108864
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "time_allreduce.h"

int main(int argc, char **argv) {
	const char *threads = getenv("XLADDP_BENCH_MPI_THREADS");
	if (threads && strcmp(threads, "multiple") == 0) {
		int provided;
		MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
	} else {
		MPI_Init(&argc, &argv);
	}
	int rank;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	for (int a = 1; a < argc; a++) {
		long bytes = atol(argv[a]);
		int n = (int)(bytes / 4);
		float *buf = malloc((size_t)n * 4);
		for (int i = 0; i < n; i++) buf[i] = 1;
		double sec = time_allreduce(buf, n, rank, MPI_COMM_WORLD);
		if (rank == 0) {
			printf("{\"Bytes\": %ld, \"Seconds\": %.9g}\n", bytes, sec);
			fflush(stdout);
		}
		free(buf);
	}
	MPI_Finalize();
	return 0;
}
