//go:build mpi

package dist

import "github.com/xladdp/xladdp/ddp/internal/mpiengine"

// EnvMPIThreads is the thread level the mpi backend asks MPI for:
// multiple (the default), serialized or funneled.
const EnvMPIThreads = mpiengine.EnvMPIThreads
