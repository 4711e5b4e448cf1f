package workerenv

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func workerenv0() []int { return []int{Unset, Unset, Unset, Unset} }

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		check   func(t *testing.T, w World)
		wantErr string
	}{
		{"nothing set", nil, func(t *testing.T, w World) {
			assert.Equal(t, Empty(), w)
			assert.False(t, w.Launched())
			assert.True(t, w.IsRankZero())
		}, ""},
		{"torchrun", map[string]string{Rank: "3", WorldSize: "4", LocalRank: "1", LocalWorldSize: "2", NodeRank: "1",
			MasterAddr: "10.0.0.1", MasterPort: "29500", RunID: "job", RestartCount: "2", AgentStore: "True"},
			func(t *testing.T, w World) {
				assert.Equal(t, []int{3, 4, 1, 2, 1, 2}, []int{w.Rank, w.WorldSize, w.LocalRank, w.LocalWorldSize, w.NodeRank, w.RestartCount})
				assert.Equal(t, "10.0.0.1:29500 job", w.MasterAddr+":"+w.MasterPort+" "+w.RunID)
				assert.True(t, w.AgentStore)
				assert.True(t, w.Launched())
				assert.False(t, w.IsRankZero())
			}, ""},
		{"Open MPI when torch's are absent", map[string]string{OpenMPIRank: "0", OpenMPIWorldSize: "2",
			OpenMPILocalRank: "0", OpenMPILocalWorldSize: "2", OpenMPIJobID: "123"},
			func(t *testing.T, w World) {
				assert.Equal(t, workerenv0(), []int{w.Rank, w.WorldSize, w.LocalRank, w.LocalWorldSize}, "torch's are unset")
				p := w.Placed()
				assert.Equal(t, []int{0, 2, 0, 2}, []int{p.Rank, p.WorldSize, p.LocalRank, p.LocalWorldSize})
				assert.True(t, w.Launched())
				assert.True(t, w.OpenMPI.SingleHost())
			}, ""},
		{"torch's win over Open MPI's", map[string]string{Rank: "1", OpenMPIRank: "0", WorldSize: "2"},
			func(t *testing.T, w World) {
				assert.Equal(t, 1, w.Placed().Rank)
				assert.False(t, w.IsRankZero())
				assert.False(t, w.OpenMPI.SingleHost())
			}, ""},
		{"Open MPI across hosts", map[string]string{OpenMPIRank: "0", OpenMPIWorldSize: "4", OpenMPILocalWorldSize: "2", OpenMPIJobID: "9"},
			func(t *testing.T, w World) { assert.False(t, w.OpenMPI.SingleHost()) }, ""},
		{"Open MPI rank 1 is not rank zero", map[string]string{OpenMPIRank: "1"},
			func(t *testing.T, w World) { assert.False(t, w.IsRankZero()) }, ""},
		{"OpenMP's nested list is kept as given", map[string]string{Threads: "4,2"},
			func(t *testing.T, w World) { assert.Equal(t, "4,2", w.Threads) }, ""},
		{"a bad rank names the variable", map[string]string{Rank: "x"}, nil, `$RANK="x" is not an integer`},
		{"a bad Open MPI size names its variable", map[string]string{OpenMPIWorldSize: "2.5"}, nil, `$OMPI_COMM_WORLD_SIZE="2.5" is not an integer`},
		{"a negative rank", map[string]string{Rank: "-1"}, nil, `$RANK="-1": want a whole number from 0`},
		{"a huge number", map[string]string{WorldSize: "99999999999999999999"}, nil, `$WORLD_SIZE="99999999999999999999" is not an integer`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := Parse(envOf(tt.env))
			if tt.wantErr != "" {
				assert.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			tt.check(t, w)
		})
	}
}

// What Environ writes, Parse reads back the same; every name it writes
// placing the process is one Names lists (so a cleared environment clears
// it); OMP_NUM_THREADS is the runtime's own, which clearing would change.
func TestEnvironRoundTrip(t *testing.T) {
	w := World{OpenMPI: Empty().OpenMPI, Rank: 5, WorldSize: 8, LocalRank: 1, LocalWorldSize: 4, NodeRank: 1, RoleRank: 5, RoleWorldSize: 8,
		RoleName: "default", MasterAddr: "h", MasterPort: "1234", RestartCount: 0, MaxRestarts: 3, RunID: "r",
		AgentStore: true, SpawnChild: true, Transport: "mpi", BindCPUs: true, CompileOnly: true, Threads: "1"}
	env := w.Environ()
	m := map[string]string{}
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		require.True(t, ok, kv)
		if k != Threads {
			assert.Contains(t, Names(), k)
		}
		m[k] = v
	}
	assert.Equal(t, "0", m[RestartCount], "a zero restart count is written")
	got, err := Parse(envOf(m))
	require.NoError(t, err)
	assert.Equal(t, w, got)
	assert.Empty(t, Empty().Environ())
	assert.Len(t, Cleared(), len(Names()))
	for _, v := range PerRank() {
		assert.Contains(t, Names(), v)
	}
}
