//go:build mpi

package dist

import "testing"

// TestMPIFlightRecord: the mpi backend's operations are recorded as the
// tcp backend's are (TestFlightRecord).
func TestMPIFlightRecord(t *testing.T) {
	res := mpirunJob(t, "flight", 3, nil, "XLADDP_TEST_TIMEOUT=60s")
	requireClean(t, res)
	reps := make([]report, len(res.Reps))
	for r, rep := range res.Reps {
		reps[r] = *rep
	}
	checkFlightReports(t, reps)
}
