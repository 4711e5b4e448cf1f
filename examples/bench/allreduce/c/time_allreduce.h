/* The timing loop of raw MPI_Allreduce, shared by mpi_allreduce.c and the
 * Go benchmark's in-process comparison (rawmpi), so both time it alike:
 * float32 SUM in place on comm, 2 warm-ups, then batches of back-to-back
 * calls (up to 100, about 1 MiB in all) until about 0.5 s has passed and
 * at least 3 calls ran, rank 0 deciding when to stop by a broadcast
 * between batches. Returns the mean seconds per all-reduce. */
#include <mpi.h>

static double time_allreduce(float *buf, int n, int rank, MPI_Comm comm) {
	for (int i = 0; i < 2; i++) MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, comm);
	long iters = 0;
	double elapsed = 0;
	long bytes = (long)n * 4;
	int reps = (int)((1L << 20) / bytes);
	if (reps < 1) reps = 1;
	if (reps > 100) reps = 100;
	for (;;) {
		int stop = rank == 0 && iters >= 3 && elapsed >= 0.5;
		MPI_Bcast(&stop, 1, MPI_INT, 0, comm);
		if (stop) break;
		double start = MPI_Wtime();
		for (int i = 0; i < reps; i++) MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, comm);
		elapsed += MPI_Wtime() - start;
		iters += reps;
	}
	return elapsed / iters;
}

