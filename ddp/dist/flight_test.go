package dist

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/ddp/internal/flight"
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
	t.Run("XLADDP_FLIGHT_SIZE=0", func(t *testing.T) {
		cmds, outs := launch(t, "flight", 2, "XLADDP_TEST_TIMEOUT=60s", "XLADDP_FLIGHT_SIZE=0")
		for _, rep := range waitReports(t, cmds, outs) {
			require.Empty(t, rep.Error, "rank %d", rep.Rank)
			assert.Empty(t, rep.Errors, "rank %d: the recorder is off", rep.Rank)
		}
	})
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

func init() { scenarios["flight-hang"] = flightHangScenario }

// flightHangScenario: 3 all-reduces, then rank 1 never joins the
// barrier every other rank waits in; each rank marks in $XLADDP_TEST_DIR
// that it got there.
func flightHangScenario(ctx context.Context, g *ProcessGroup, rep *report) {
	buf := Float32s(make([]float32, 4))
	for range 3 {
		if err := g.AllReduce(ctx, buf, Sum); err != nil {
			rep.Error = err.Error()
			return
		}
	}
	if err := os.WriteFile(filepath.Join(os.Getenv("XLADDP_TEST_DIR"), fmt.Sprintf("ready-%d", g.Rank())), nil, 0o644); err != nil {
		rep.Error = err.Error()
		return
	}
	if g.Rank() == 1 {
		time.Sleep(time.Minute) // the test kills it first
	}
	_ = g.Barrier(ctx)
}

// TestFlightDumpNamesTheRankBehind: in a hang (rank 1 never joins a
// barrier), SIGUSR1 makes every rank write its flight record into
// $XLADDP_FLIGHT_DIR, and the diagnosis of the dumps names rank 1, the
// collective it never joined, its last call and where the others wait.
// Killing rank 1 then fails the others, which dump again with the cause.
func TestFlightDumpNamesTheRankBehind(t *testing.T) {
	marks, dumps := t.TempDir(), t.TempDir()
	cmds, outs := launch(t, "flight-hang", 3, "XLADDP_TEST_TIMEOUT=60s", "XLADDP_TEST_DIR="+marks, EnvFlightDir+"="+dumps)
	defer func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
		}
		waitReports(t, cmds, outs)
	}()
	require.Eventually(t, func() bool {
		m, _ := filepath.Glob(filepath.Join(marks, "ready-*"))
		return len(m) == 3
	}, 30*time.Second, 20*time.Millisecond)
	time.Sleep(200 * time.Millisecond) // ranks 0 and 2 enter the barrier
	for _, c := range cmds {
		require.NoError(t, c.Process.Signal(syscall.SIGUSR1))
	}
	var got []flight.Dump
	require.Eventually(t, func() bool {
		var err error
		got, err = flight.Read(dumps)
		return err == nil && len(got) == 3
	}, 10*time.Second, 20*time.Millisecond)
	msg := flight.Diagnose(got, flight.Ranks(3))
	t.Log(msg)
	assert.Regexp(t, `^rank 1 finished AllReduce #3 but never joined #4; its last call was flight_test\.go:\d+; `+
		`ranks 0,2 wait in Barrier #4 at flight_test\.go:\d+$`, msg)
	for _, d := range got {
		assert.Equal(t, "SIGUSR1", d.Reason, "rank %d", d.Rank)
	}

	require.NoError(t, cmds[1].Process.Kill())
	require.Eventually(t, func() bool {
		got, err := flight.Read(dumps)
		if err != nil || len(got) != 3 {
			return false
		}
		return got[0].Reason != "SIGUSR1" && got[2].Reason != "SIGUSR1"
	}, 10*time.Second, 20*time.Millisecond, "the failure makes ranks 0 and 2 dump again")
	got, err := flight.Read(dumps)
	require.NoError(t, err)
	assert.Contains(t, got[0].Reason, "rank 1")
	assert.Regexp(t, `ranks 0,2 failed in Barrier #4 at flight_test\.go:\d+`, flight.Diagnose(got, flight.Ranks(3)))
}
