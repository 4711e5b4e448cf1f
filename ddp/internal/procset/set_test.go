package procset

import (
	"io"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSucceeded: a set has succeeded once every process exited 0; not
// while one runs, not when one failed, not when empty.
func TestSucceeded(t *testing.T) {
	assert.False(t, NewSet(0).Succeeded(), "an empty set ran nothing")
	for _, tc := range []struct {
		name  string
		codes []string
		want  bool
	}{
		{"all 0", []string{"0", "0"}, true},
		{"one failed", []string{"0", "3"}, false},
		{"one preempted", []string{"75", "0"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set := NewSet(len(tc.codes))
			for i, c := range tc.codes {
				require.NoError(t, set.Start(NewProcess(exec.Command("sh", "-c", "exit "+c), i, i), io.Discard, io.Discard))
			}
			for range tc.codes {
				<-set.Exits
			}
			assert.Equal(t, tc.want, set.Succeeded())
			set.Stop(0)
		})
	}
	set := NewSet(1)
	require.NoError(t, set.Start(NewProcess(exec.Command("sleep", "10"), 0, 0), io.Discard, io.Discard))
	assert.False(t, set.Succeeded(), "still running")
	set.Stop(0)
}
