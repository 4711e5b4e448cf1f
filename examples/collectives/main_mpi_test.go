//go:build mpi

package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/xladdp/xladdp/examples/internal/exampletest"
)

// TestSeedDemoOnTheMPIBackend: under mpirun with --backend mpi, every
// operation of the demo goes through MPI and prints the seed's results.
func TestSeedDemoOnTheMPIBackend(t *testing.T) {
	assert.Equal(t, wantFour, launched(t, []string{"--backend", "mpi"}, exampletest.Mpirun(t), "--allow-run-as-root", "--oversubscribe", "-np", "4"))
}
