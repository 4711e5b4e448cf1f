//go:build mpi

package main

import (
	"testing"

	"github.com/xladdp/xladdp/examples/internal/exampletest"
)

// TestLongMPIDeterministic: mpirun with the mpi backend, 2 and 3 ranks,
// trains the weights one process trains.
func TestLongMPIDeterministic(t *testing.T) {
	exampletest.CleanEnv(t)
	exampletest.SameWeightsEverywhere(t, "gpt", deterministic(t, "200", "fp32"), []exampletest.Layout{
		exampletest.Spawned(1), exampletest.MPIRanks(t, 2), exampletest.MPIRanks(t, 3),
	})
}
