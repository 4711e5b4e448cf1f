//go:build mpi

package main

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/xladdp/xladdp/examples/internal/exampletest"
)

// TestLongMPIPreemptedResumesBitIdentical: SIGTERM to ddprun
// --backend=mpi (2 ranks under mpirun, the process group on MPI) at a
// random epoch: exit 75; the same command again resumes and ends with the
// uninterrupted run's weights, bit for bit.
func TestLongMPIPreemptedResumesBitIdentical(t *testing.T) {
	exampletest.Mpirun(t)
	exampletest.CleanEnv(t)
	job := exampletest.Job{Name: "linear", Launch: []string{"--backend=mpi", "--nproc_per_node=2"},
		Args: []string{"--epochs", "400", "--checkpoint-every", "5", "--backend", "mpi"}}
	job.PreemptAndResume(t, job.Weights(t), exampletest.Marks("epoch %d:", 10, 30, 60, 100, 150, 200),
		rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0)))
}
