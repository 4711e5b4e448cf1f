package progshare

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/internal/procfs"
)

// claimedBy records c as the claimant of program "p" in xs's store,
// with the claim taken and no beat.
func claimedBy(t *testing.T, xs []*Exchange, c claimant) {
	t.Helper()
	_, err := xs[0].st.Add(t.Context(), programKey("p", "claim"), 1)
	require.NoError(t, err)
	raw, err := json.Marshal(c)
	require.NoError(t, err)
	require.NoError(t, xs[0].st.Set(t.Context(), programKey("p", "claimant"), raw))
}

// stoppedProcess is a process of this host, SIGSTOPped, as the claimant
// that compiles.
func stoppedProcess(t *testing.T, rank int) claimant {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	require.NoError(t, cmd.Process.Signal(syscall.SIGSTOP))
	pid := cmd.Process.Pid
	require.Eventually(t, func() bool { return procfs.Stopped(procfs.State("/proc", pid)) }, 5*time.Second, 10*time.Millisecond)
	host, _ := os.Hostname()
	start, ok := procfs.StartTime("/proc", pid)
	require.True(t, ok)
	return claimant{Rank: rank, PID: pid, Host: host, Start: start}
}

// TestFetchPassesAStoppedClaimant: a claimant SIGSTOPped on this host
// while compiling is passed after two silent beats, not a stall, and
// named with the command that resumes it.
func TestFetchPassesAStoppedClaimant(t *testing.T) {
	xs := exchangesPassingAfter(t, 2, time.Hour)
	c := stoppedProcess(t, 0)
	claimedBy(t, xs, c)
	start := time.Now()
	_, err := xs[1].Fetch(t.Context(), "p")
	pid := strconv.Itoa(c.PID)
	assert.ErrorContains(t, err, "rank 0 (pid "+pid+" on "+c.Host+"; stopped: kill -CONT "+pid+" resumes it), which compiles it, is stopped")
	assert.Less(t, time.Since(start), time.Minute, "not the stall")
}

// TestFetchNamesASilentClaimant: a claimant that stops beating is named
// in the log while the wait lasts, and in the error when it is passed;
// one whose pid is now another process's, or that runs on another host,
// is never taken as stopped.
func TestFetchNamesASilentClaimant(t *testing.T) {
	var log bytes.Buffer
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(&log, nil)))

	stopped := stoppedProcess(t, 0)
	reused := stopped
	reused.Start++
	elsewhere := stopped
	elsewhere.Host = "another-host"
	for _, tc := range []struct {
		name string
		c    claimant
		who  string
	}{
		{"a pid reused", reused, "rank 0 (pid " + strconv.Itoa(stopped.PID) + " on " + stopped.Host + "; gone)"},
		{"another host", elsewhere, "rank 0 (pid " + strconv.Itoa(stopped.PID) + " on another-host)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log.Reset()
			// The fetch looks at the beat once a second (fetchSlice):
			// it says the wait at the second look, passes at the fourth.
			xs := exchangesPassingAfter(t, 2, 2500*time.Millisecond)
			claimedBy(t, xs, tc.c)
			_, err := xs[1].Fetch(t.Context(), "p")
			assert.ErrorContains(t, err, tc.who+", which compiles it, has not been heard from for")
			assert.Contains(t, log.String(), "waiting for "+tc.who+" to compile a program")
		})
	}
}
