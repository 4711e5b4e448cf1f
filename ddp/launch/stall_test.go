package launch

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStalledRankIsNamed: SIGSTOP one rank of a 3-rank job and ddprun
// says, within --stall_warn and while the stall lasts, that the rank is
// stopped (with its pid and how to resume it) and where the others wait
// (the collective's number and file:line), killing nothing; SIGCONT, and
// the job goes on and finishes.
func TestStalledRankIsNamed(t *testing.T) {
	t.Parallel() // mostly waiting
	dir := t.TempDir()
	mark := "stall" + strconv.FormatInt(time.Now().UnixNano(), 36)
	_, before := leftovers(t, mark)
	args := append([]string{"--nproc_per_node=3", "--stall_warn=1", "--monitor_interval=0.05"}, os.Args[0], "-test.run=^$")
	c, err := ParseArgs(args, func(string) string { return "" }, os.Stderr)
	require.NoError(t, err)
	environ := append(os.Environ(), workerEnvName+"=preemptible", "XLADDP_LAUNCH_TEST_MARK="+mark, "MASTER_ADDR=", "MASTER_PORT=",
		"RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "LOCAL_WORLD_SIZE=", "TMPDIR="+t.TempDir(), "XLADDP_TEST_DIR="+dir)
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() { done <- Run(t.Context(), c, environ, &out, &errb) }()

	var pid int
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(filepath.Join(dir, "at-10-1"))
		pid, _ = strconv.Atoi(string(b))
		return err == nil && pid > 0
	}, time.Minute, 10*time.Millisecond, "rank 1 reaches step 10")
	// A loaded machine may stall the job (and ddprun say so) before the
	// stop: only the words after it count.
	wordsBefore := len(errb.String())
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	stopped := time.Now()
	after := func() string { return errb.String()[wordsBefore:] }
	said := func() int { return strings.Count(after(), "no collective has completed for") }
	require.Eventually(t, func() bool { return said() >= 2 }, 60*time.Second, 50*time.Millisecond,
		"said, and said again while the stall lasts: %s", errb.String())
	t.Logf("first word %s after SIGSTOP", time.Since(stopped))
	assert.Contains(t, after(), "rank 1 is stopped (pid "+strconv.Itoa(pid)+"; kill -CONT "+strconv.Itoa(pid)+" resumes it)")
	assert.Regexp(t, `ranks 0,2 wait in AllReduce #\d+ at \S+\.go:\d+`, after())
	require.NoError(t, syscall.Kill(pid, syscall.SIGCONT))
	select {
	case code := <-done:
		assert.Equal(t, 0, code, errb.String())
	case <-time.After(time.Minute):
		t.Fatal("the job did not finish after SIGCONT")
	}
	assert.Contains(t, out.String(), "]:PARAMS ", "rank 0 finished the training")
	assertNothingLeft(t, mark, before)
}

// TestStallWatchSparesAProgramWithoutAGroup: a worker with no process
// group writes no flight record, so a short --stall_warn never speaks of
// it, and asking it (SIGUSR1) does not kill it: the job ends well.
func TestStallWatchSparesAProgramWithoutAGroup(t *testing.T) {
	t.Parallel()
	mark := "stallnogroup" + strconv.FormatInt(time.Now().UnixNano(), 36)
	_, before := leftovers(t, mark)
	res := runAgent(t.Context(), t, mark, "nogroup-sleep", []string{"--nproc_per_node=2", "--stall_warn=0.2", "--monitor_interval=0.05"})
	assert.Equal(t, 0, res.code, res.stderr)
	assert.Equal(t, 2, strings.Count(res.stdout, "awake"), res.stdout)
	assert.NotContains(t, res.stderr, "no collective has completed")
	assertNothingLeft(t, mark, before)
}

// TestDeclaredWorkIsNotAStall: ranks evaluating for 3 s between
// collectives (dist's Busy, which the examples' evaluations declare) get
// no stall word at --stall_warn=1; the same 3 s undeclared get one,
// saying every rank is in no collective.
func TestDeclaredWorkIsNotAStall(t *testing.T) {
	for _, tc := range []struct {
		fault string
		said  bool
	}{{"evaluating", false}, {"idle", true}} {
		t.Run(tc.fault, func(t *testing.T) {
			t.Parallel() // mostly waiting
			mark := "busy" + tc.fault + strconv.FormatInt(time.Now().UnixNano(), 36)
			_, before := leftovers(t, mark)
			res := runAgent(t.Context(), t, mark, "fault-"+tc.fault, []string{"--nproc_per_node=2", "--stall_warn=1", "--monitor_interval=0.05"},
				"XLADDP_TEST_TIMEOUT=60s")
			assert.Equal(t, 0, res.code, res.stderr)
			if tc.said {
				assert.Contains(t, res.stderr, "ranks 0,1 finished AllReduce #2 and are in no collective")
			} else {
				assert.NotContains(t, res.stderr, "no collective has completed", "declared work is not a stall")
			}
			assertNothingLeft(t, mark, before)
		})
	}
}
