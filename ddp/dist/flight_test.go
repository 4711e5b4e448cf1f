package dist

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func init() { scenarios["flight"] = flightScenario }

// nextLine is the file:line after its caller's: the call it precedes.
func nextLine() string {
	_, file, line, _ := runtime.Caller(1)
	return fmt.Sprintf("%s:%d", filepath.Base(file), line+1)
}

// flightScenario issues collectives inline and queued and a send between
// ranks 0 and 1, then reports its flight record, one line per entry
// (Errors), and a failure where an entry's caller is not the line that
// issued it.
func flightScenario(ctx context.Context, g *ProcessGroup, rep *report) {
	buf := Float32s(make([]float32, 7))
	var callers []string
	check := func(err error) {
		if err != nil && rep.Error == "" {
			rep.Error = err.Error()
		}
	}
	callers = append(callers, nextLine())
	check(g.AllReduce(ctx, buf, Sum))
	callers = append(callers, nextLine())
	w1 := g.AllReduceAsync(buf, Max)
	callers = append(callers, nextLine())
	w2 := g.BroadcastAsync(Int64s(make([]int64, 3)), 1)
	check(w1.Wait(ctx))
	check(w2.Wait(ctx))
	switch g.Rank() {
	case 0:
		callers = append(callers, nextLine())
		check(g.Send(ctx, buf, 1, 5))
	case 1:
		callers = append(callers, nextLine())
		check(g.Recv(ctx, buf, 0, 5))
	}
	callers = append(callers, nextLine())
	check(g.Barrier(ctx))
	for i, e := range g.FlightRecord() {
		rep.Errors = append(rep.Errors, fmt.Sprintf("%d %v %s %s %d %d %s", e.Seq, e.P2P, e.Name, e.DType, e.Count, e.Peer, e.State))
		if i < len(callers) && filepath.Base(e.Caller) != callers[i] {
			rep.Failures = append(rep.Failures, fmt.Sprintf("entry %d was issued at %s, recorded at %s", i, callers[i], e.Caller))
		}
		if e.Issued.IsZero() || e.Started.Before(e.Issued) || e.Ended.Before(e.Started) {
			rep.Failures = append(rep.Failures, fmt.Sprintf("entry %d's times are out of order: %v", i, e))
		}
	}
}

// TestFlightRecord: every operation a rank issues, inline or queued,
// collective or point-to-point, is in its flight record with its number,
// op, dtype, count, peer, state and the user code's file:line, on
// shared memory and over TCP.
func TestFlightRecord(t *testing.T) {
	for _, shm := range []string{"XLADDP_SHM_MIB=16", "XLADDP_SHM_MIB=0"} {
		t.Run(shm, func(t *testing.T) {
			cmds, outs := launch(t, "flight", 3, "XLADDP_TEST_TIMEOUT=60s", shm)
			checkFlightReports(t, waitReports(t, cmds, outs))
		})
	}
}

// checkFlightReports checks each rank's record of flightScenario.
func checkFlightReports(t *testing.T, reps []report) {
	t.Helper()
	require.NotEmpty(t, reps)
	for _, rep := range reps {
		require.Empty(t, rep.Error, "rank %d", rep.Rank)
		assert.Empty(t, rep.Failures, "rank %d", rep.Rank)
		want := []string{"1 false AllReduce float32 7 -1 done", "2 false AllReduce float32 7 -1 done",
			"3 false Broadcast int64 3 1 done"}
		switch rep.Rank {
		case 0:
			want = append(want, "1 true Send float32 7 1 done")
		case 1:
			want = append(want, "1 true Recv float32 7 0 done")
		}
		want = append(want, "4 false Barrier  0 -1 done")
		assert.Equal(t, want, rep.Errors, "rank %d", rep.Rank)
	}
}
