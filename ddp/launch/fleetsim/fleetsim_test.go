package fleetsim

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSimulatePlaysEveryPhase: a small fleet (8 nodes of 4 ranks)
// goes through every phase of the control plane with the real code, and
// the failure reaches every other agent within a few monitor ticks.
func TestSimulatePlaysEveryPhase(t *testing.T) {
	rep, err := Simulate(t.Context(), Options{Nodes: 8, RanksPerNode: 4, Programs: 2, ProgramBytes: 1 << 20,
		FlightEntries: 32, MonitorInterval: 20 * time.Millisecond, LastCallTimeout: time.Second})
	require.NoError(t, err)
	assert.Equal(t, 32, rep.Ranks)
	for name, d := range map[string]time.Duration{"agents": rep.AgentRendezvous, "met": rep.WorkersMet, "barrier": rep.Barrier,
		"fan-out": rep.FanOut, "stop": rep.Stop, "flight": rep.FlightExchange} {
		assert.Positive(t, d, name)
	}
	assert.Less(t, rep.Stop, 2*time.Second)
	assert.LessOrEqual(t, rep.WorkersMet, rep.Barrier)
	assert.Positive(t, rep.Diagnosis)
	assert.Positive(t, rep.FlightBytes)
	t.Log(rep)
	_, err = Simulate(t.Context(), Options{Nodes: 1, RanksPerNode: 4})
	assert.ErrorContains(t, err, "want at least 2 nodes")
}
