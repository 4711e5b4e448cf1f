/* Raw MPI_Allreduce from C, timed exactly as examples/bench/allreduce
 * times ddp's all-reduce: float32 SUM in place, 2 warm-ups, then batches
 * of back-to-back calls (up to 100, about 1 MiB in all) until about 0.5 s
 * has passed and at least 3 calls ran, rank 0 deciding when to stop by a
 * broadcast between batches. Rank 0 prints one JSON line per size:
 * {"Bytes": N, "Seconds": mean seconds per all-reduce}.
 *
 *   mpicc -O2 -o mpi_allreduce mpi_allreduce.c
 *   mpirun -np 2 ./mpi_allreduce 4096 1048576 67108864
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static double time_allreduce(float *buf, int n, int rank) {
	for (int i = 0; i < 2; i++) MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
	long iters = 0;
	double elapsed = 0;
	long bytes = (long)n * 4;
	int reps = (int)((1L << 20) / bytes);
	if (reps < 1) reps = 1;
	if (reps > 100) reps = 100;
	for (;;) {
		int stop = rank == 0 && iters >= 3 && elapsed >= 0.5;
		MPI_Bcast(&stop, 1, MPI_INT, 0, MPI_COMM_WORLD);
		if (stop) break;
		double start = MPI_Wtime();
		for (int i = 0; i < reps; i++) MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
		elapsed += MPI_Wtime() - start;
		iters += reps;
	}
	return elapsed / iters;
}

int main(int argc, char **argv) {
	MPI_Init(&argc, &argv);
	int rank;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	for (int a = 1; a < argc; a++) {
		long bytes = atol(argv[a]);
		int n = (int)(bytes / 4);
		float *buf = malloc((size_t)n * 4);
		for (int i = 0; i < n; i++) buf[i] = 1;
		double sec = time_allreduce(buf, n, rank);
		if (rank == 0) {
			printf("{\"Bytes\": %ld, \"Seconds\": %.9g}\n", bytes, sec);
			fflush(stdout);
		}
		free(buf);
	}
	MPI_Finalize();
	return 0;
}
