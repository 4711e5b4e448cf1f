//go:build mpi

package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/xladdp/xladdp/examples/internal/exampletest"
)

// TestLearnsOnTheMPIBackend: 2 ranks under mpirun average their gradients
// through MPI (--backend mpi) and train as they do through the TCP
// backend, each printing the seed's sizes.
func TestLearnsOnTheMPIBackend(t *testing.T) {
	mpirun := exampletest.Mpirun(t)
	before, after, out := launched(t, nil, mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2")
	mb, ma, mout := launched(t, []string{"--backend", "mpi"}, mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2")
	assert.Less(t, ma, mb-0.2, mout)
	assert.InDelta(t, before, mb, 1e-4, out)
	assert.InDelta(t, after, ma, 1e-4, mout)
	assert.Contains(t, mout, "rank 1: In Model: input size [15 5] output size [15 2]")
}
