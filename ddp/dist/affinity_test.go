package dist

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func init() { scenarios["bound-cpus"] = boundCPUsScenario }

// boundCPUsScenario reports the CPUs this rank's threads may use: the
// main one, and one the runtime starts afterwards.
func boundCPUsScenario(_ context.Context, _ *ProcessGroup, rep *report) {
	rep.Hashes["main"] = fmt.Sprint(boundCPUs())
	done := make(chan string)
	go func() {
		runtime.LockOSThread() // a thread of its own, possibly new
		done <- fmt.Sprint(boundCPUs())
	}()
	rep.Hashes["later"] = <-done
	rep.Hashes["gomaxprocs"] = strconv.Itoa(runtime.GOMAXPROCS(0))
}

// TestBindCPUs: with XLADDP_BIND_CPUS=1 the ranks on a host get disjoint
// shares of its CPUs covering them all, threads started later included,
// and GOMAXPROCS is the share's size; without it they keep every CPU.
func TestBindCPUs(t *testing.T) {
	all := boundCPUs()
	cmds, outs := launch(t, "bound-cpus", 2, "XLADDP_TEST_TIMEOUT=20s", EnvBindCPUs+"=1")
	reps := waitReports(t, cmds, outs)
	if len(all) < 2 {
		// Fewer CPUs than ranks: nothing to share out, every rank keeps all.
		for r, rep := range reps {
			require.Empty(t, rep.Error, "rank %d", r)
			assert.Equal(t, fmt.Sprint(all), rep.Hashes["main"], "rank %d", r)
		}
		return
	}
	var union []int
	for r, rep := range reps {
		require.Empty(t, rep.Error, "rank %d", r)
		assert.Equal(t, rep.Hashes["main"], rep.Hashes["later"], "rank %d: a later thread escaped the binding", r)
		var cpus []int
		for _, c := range all {
			if slices.Contains(parseCPUs(rep.Hashes["main"]), c) {
				cpus = append(cpus, c)
			}
		}
		assert.Len(t, cpus, len(all)/2, "rank %d: %s", r, rep.Hashes["main"])
		assert.Equal(t, strconv.Itoa(len(all)/2), rep.Hashes["gomaxprocs"], "rank %d: GOMAXPROCS", r)
		union = append(union, cpus...)
	}
	slices.Sort(union)
	assert.Equal(t, all, union, "the ranks' CPUs do not partition the machine's")

	cmds, outs = launch(t, "bound-cpus", 2, "XLADDP_TEST_TIMEOUT=20s", EnvBindCPUs+"=")
	for r, rep := range waitReports(t, cmds, outs) {
		require.Empty(t, rep.Error, "rank %d", r)
		assert.Equal(t, fmt.Sprint(all), rep.Hashes["main"], "rank %d bound without being asked", r)
	}
}

// parseCPUs reads fmt.Sprint of a []int.
func parseCPUs(s string) []int {
	var out []int
	for _, f := range strings.Fields(strings.Trim(s, "[]")) {
		if c, err := strconv.Atoi(f); err == nil {
			out = append(out, c)
		}
	}
	return out
}
