//go:build mpi

package dist

import "github.com/xladdp/xladdp/ddp/internal/mpiengine"

// EnvMPIThreads is the thread level the mpi backend asks MPI for:
// multiple (the default), serialized or funneled.
const EnvMPIThreads = mpiengine.EnvMPIThreads

// EnvMPIReduceOrder orders the mpi backend's float sums: mpi (MPI's own
// algorithms, the default) or rank (rank order, as the tcp/shm backend).
const EnvMPIReduceOrder = mpiengine.EnvMPIReduceOrder
