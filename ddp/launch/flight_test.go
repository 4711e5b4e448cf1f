package launch

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/xladdp/xladdp/ddp/internal/flight"
)

// TestFlightDir: a $XLADDP_FLIGHT_DIR that cannot hold the records is
// refused before any worker starts; a usable one gets each attempt's
// records (attempt_0, attempt_1 after a restart) in a directory of this
// job's own, kept after the job; an earlier job's there are not read.
func TestFlightDir(t *testing.T) {
	t.Run("unusable", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "a-file")
		require.NoError(t, os.WriteFile(file, nil, 0o644))
		mark := "flight-bad" + strconv.FormatInt(time.Now().UnixNano(), 36)
		res := runAgent(t.Context(), t, mark, "ok", []string{"--nproc_per_node=2"}, "XLADDP_FLIGHT_DIR="+filepath.Join(file, "sub"))
		assert.Equal(t, 1, res.code)
		assert.Contains(t, res.stderr, "$XLADDP_FLIGHT_DIR="+filepath.Join(file, "sub")+" cannot hold the workers' flight records")
		assert.NotContains(t, res.stdout, "sum", "no worker started")
	})
	t.Run("kept per job and attempt", func(t *testing.T) {
		dir := t.TempDir()
		// An earlier job's records, at the old layout and at this one's
		// names: none is read as this job's.
		stale := flight.Dump{Rank: 5, World: 6, Transport: "tcp", Reason: "an earlier job",
			Entries: []flight.Entry{{Op: flight.Op{Seq: 7, Name: "AllReduce", DType: "float32", Count: 4, Peer: -1}, State: flight.Started}}}
		for _, old := range []string{filepath.Join(dir, "attempt_1"), filepath.Join(dir, "job-20260101-000000-1", "attempt_1")} {
			require.NoError(t, flight.Write(old, stale))
		}
		mark := "flight-dir" + strconv.FormatInt(time.Now().UnixNano(), 36)
		_, before := leftovers(t, mark)
		res := runAgent(t.Context(), t, mark, "fail", []string{"--nproc_per_node=3", "--max_restarts=1", "--monitor_interval=0.05"},
			"XLADDP_TEST_TIMEOUT=3s", "XLADDP_FLIGHT_DIR="+dir)
		assert.Equal(t, 3, res.code, res.stderr)
		jobs, _ := filepath.Glob(filepath.Join(dir, "job-*"))
		require.Len(t, jobs, 2, "this job's directory beside the earlier one's")
		job := jobs[1]
		if strings.HasSuffix(job, "job-20260101-000000-1") {
			job = jobs[0]
		}
		assert.Contains(t, res.stderr, "ddprun: flight record ("+filepath.Join(job, "attempt_1")+"): rank 1 finished AllReduce #1")
		assert.NotContains(t, res.stderr, "#7", "the earlier job's records")
		for _, attempt := range []string{"attempt_0", "attempt_1"} {
			dumps, _ := filepath.Glob(filepath.Join(job, attempt, "flight-rank*.json"))
			assert.Len(t, dumps, 3, attempt)
		}
		assertNothingLeft(t, mark, before)
	})
}

// TestFlightOnRequest: ddprun's own SIGUSR1 (Config.FlightRequests) has
// the workers of a hung job write their records and prints which rank
// stands where, leaving the job running until it is stopped; stopped, it
// prints the diagnosis again.
func TestFlightOnRequest(t *testing.T) {
	t.Parallel() // mostly waiting
	mark := "flightreq" + strconv.FormatInt(time.Now().UnixNano(), 36)
	_, before := leftovers(t, mark)
	requests := make(chan struct{})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		// A request a second: the ranks reach the hang (rank 1 past
		// collective #2, the others in #3) within about a second alone,
		// later on a loaded machine; the later requests find it.
		for range 15 {
			time.Sleep(time.Second)
			requests <- struct{}{}
		}
		cancel()
	}()
	res := runAgentWith(ctx, t, mark, "fault-hang", []string{"--nproc_per_node=3", "--monitor_interval=0.05"},
		func(c *Config) { c.FlightRequests = requests }, "XLADDP_TEST_TIMEOUT=60s")
	assert.Equal(t, 130, res.code, res.stderr)
	assert.Contains(t, res.stderr, "ddprun: flight record on request (")
	assert.Contains(t, res.stderr, "rank 1 finished AllReduce #2 but never joined #3; its last call was faults_worker_test.go:")
	assert.Contains(t, res.stderr, "ranks 0,2 wait in AllReduce #3 at faults_worker_test.go:")
	// Stopped (Ctrl-C), the job says where it stood, and keeps the records.
	assert.Contains(t, res.stderr, "ddprun: flight record when stopped (")
	assert.Regexp(t, `when stopped \(.*\): rank 1 finished AllReduce #2 but never joined #3`, res.stderr)
	assertNothingLeft(t, mark, before)
}

// TestFlightAcrossNodes: when a worker fails, its agent's diagnosis
// covers the other node's ranks too, from the records the agents
// exchange through the rendezvous store.
func TestFlightAcrossNodes(t *testing.T) {
	port := freeTestPort(t)
	mark := "flightnodes" + strconv.FormatInt(time.Now().UnixNano(), 36)
	_, before := leftovers(t, mark)
	results := runTwoAgents(t, mark, "fault-assert", 0, func(n int) []string {
		return []string{"--nnodes=2", "--nproc_per_node=2", fmt.Sprintf("--node_rank=%d", n),
			"--master_addr=127.0.0.1", fmt.Sprintf("--master_port=%d", port), "--monitor_interval=0.05"}
	}, "XLADDP_TEST_TIMEOUT=60s")
	// Rank 1 is node 0's local rank 1; ranks 2 and 3 are node 1's.
	assert.NotZero(t, results[0].code)
	assert.Contains(t, results[0].stderr, "rank 1 finished AllReduce #2 but never joined #3")
	// Node 1's ranks (2 and 3) are each named in #3, waiting or failed:
	// which, depends on when their records are taken.
	inThird := map[string]bool{}
	clause := regexp.MustCompile(`ranks? ([0-9,]+) (?:waits?|failed) in AllReduce #3 at faults_worker_test.go:`)
	for _, m := range clause.FindAllStringSubmatch(results[0].stderr, -1) {
		for _, r := range strings.Split(m[1], ",") {
			inThird[r] = true
		}
	}
	assert.True(t, inThird["2"] && inThird["3"], "node 1's ranks are not in the diagnosis: %s", results[0].stderr)
	for n, r := range results {
		assert.Less(t, r.elapsed, 6*time.Second, "agent %d: %s", n, r.stderr)
	}
	assertNothingLeft(t, mark, before)
}
