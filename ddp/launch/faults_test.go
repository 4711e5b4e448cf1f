package launch

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// faultTimeout is the collective timeout the suite's workers run with.
const faultTimeout = 2 * time.Second

// faultBackend is one way the workers' group carries its operations.
type faultBackend struct {
	name string
	args []string // ddprun's
	env  []string
}

// faultBackends are tcp and shm here; the mpi build adds mpi.
var faultBackends = []faultBackend{
	{name: "shm", env: []string{"XLADDP_SHM_MIB=16"}},
	{name: "tcp", env: []string{"XLADDP_SHM_MIB=0"}},
}

// fault is one injected fault: what every backend's message must say
// (Diagnose's line from the flight records, or the bring-up error).
type fault struct {
	name string
	says []string
	// tcpOnly: bring-up faults of ddprun's own rendezvous, which mpirun
	// replaces.
	tcpOnly bool
	// mpiSays replaces says under mpirun, which ends the ranks itself
	// (a stopped one is continued by mpirun's SIGTERM and dumps as it
	// stood).
	mpiSays []string
}

// The worker's lines, as faults_worker_test.go numbers them.
const (
	afterSecond = "rank 1 finished AllReduce #2 but never joined #3; its last call was faults_worker_test.go:"
	othersInner = " AllReduce #3 at faults_worker_test.go:"
)

var faults = []fault{
	{name: "assert", says: []string{afterSecond, `(then it panicked: "assertion failed: the loss is NaN")`, othersInner}},
	{name: "skip", says: []string{"collective #3 differs between ranks", "rank 1 called Barrier",
		"ranks 0,2 called AllReduce float32[4] at faults_worker_test.go:"}},
	{name: "shape", says: []string{"collective #3 differs between ranks", "rank 1 called AllReduce float32[5]",
		"ranks 0,2 called AllReduce float32[4]"}},
	{name: "dtype", says: []string{"collective #3 differs between ranks", "rank 1 called AllReduce float64[4]",
		"ranks 0,2 called AllReduce float32[4]"}},
	{name: "checkpoint-subset", says: []string{"differs between ranks", "rank 0 called", "ranks 1,2 called AllReduce float32[4]"}},
	// Left stopped: continued, it would run into #3 and look ahead.
	{name: "sigstop", says: []string{"rank 1 is stopped (pid ", "resumes it) and has not finished AllReduce #3", othersInner},
		mpiSays: []string{afterSecond, othersInner}},
	// Stopped inside #3, waiting there: never ahead of the others (5
	// trials in TestLongStoppedInsideACollectiveIsNeverAhead).
	{name: "sigstop-inside", says: []string{"rank 1 is stopped (pid ", "resumes it) and has not finished "},
		mpiSays: []string{" #3"}},
	{name: "sigkill", says: []string{"rank 1 left no flight dump (killed", othersInner}},
	{name: "late-peer", says: []string{"ranks [1] never joined within 2s"}, tcpOnly: true},
	{name: "port-taken", says: []string{"--master_port=", "is taken by pid ", "pick another port"}, tcpOnly: true},
}

// TestFaultSuite injects each fault into a 3-rank job on each backend:
// the job ends within the collective timeout + 5 s with a non-zero
// status and one diagnosis naming the lagging rank, the collective's
// number and op, and the ranks' user file:line, and leaves no process
// and no shared-memory segment.
func TestFaultSuite(t *testing.T) {
	for _, b := range faultBackends {
		for _, f := range faults {
			if f.tcpOnly && b.name == "mpi" {
				continue
			}
			t.Run(b.name+"/"+f.name, func(t *testing.T) {
				t.Parallel()
				mark := "fault-" + b.name + "-" + f.name + strconv.FormatInt(time.Now().UnixNano(), 36)
				_, before := leftovers(t, mark)
				args := append([]string{"--nproc_per_node=3", "--monitor_interval=0.05"}, b.args...)
				if f.name == "port-taken" {
					ln, err := net.Listen("tcp", "127.0.0.1:0")
					require.NoError(t, err)
					defer ln.Close()
					args = append(args, "--master_port="+strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
				}
				env := append([]string{"XLADDP_TEST_TIMEOUT=" + faultTimeout.String(), "XLADDP_TEST_DIR=" + t.TempDir()}, b.env...)
				res := runAgent(t.Context(), t, mark, "fault-"+f.name, args, env...)
				assert.NotZero(t, res.code, "stdout: %s\nstderr: %s", res.stdout, res.stderr)
				says := f.says
				if b.name == "mpi" && f.mpiSays != nil {
					says = f.mpiSays
				}
				for _, s := range says {
					assert.Contains(t, res.stderr, s)
				}
				bound := faultTimeout + 5*time.Second
				if b.name == "mpi" {
					// mpirun continues, then SIGTERMs, then SIGKILLs the
					// others, a sigkill timeout apart.
					bound += 2 * mpirunSigkillTimeout
				}
				assert.Less(t, res.elapsed, bound)
				for _, line := range strings.Split(res.stderr, "\n") {
					if strings.HasPrefix(line, "ddprun:") {
						t.Log(line)
					}
				}
				assertNothingLeft(t, mark, before)
			})
		}
	}
}

// TestLongStoppedInsideACollectiveIsNeverAhead: a rank SIGSTOPped inside a
// collective (it entered #3 first and waits there for the others) is
// said as stopped, and the healthy ranks are never diagnosed as behind
// it, in 5 trials. Its contribution may already be in (shared memory):
// the others then finish #3 and wait for it in the Barrier #4.
func TestLongStoppedInsideACollectiveIsNeverAhead(t *testing.T) {
	for trial := range 5 {
		t.Run(strconv.Itoa(trial), func(t *testing.T) {
			t.Parallel()
			mark := "stopinside" + strconv.Itoa(trial) + strconv.FormatInt(time.Now().UnixNano(), 36)
			_, before := leftovers(t, mark)
			res := runAgent(t.Context(), t, mark, "fault-sigstop-inside", []string{"--nproc_per_node=3", "--monitor_interval=0.05"},
				"XLADDP_TEST_TIMEOUT="+faultTimeout.String(), "XLADDP_TEST_DIR="+t.TempDir())
			assert.NotZero(t, res.code, res.stderr)
			assert.Contains(t, res.stderr, "rank 1 is stopped (pid ")
			assert.Regexp(t, `has not finished (AllReduce #3|Barrier #4)`, res.stderr)
			assert.Regexp(t, `ranks 0,2 (wait|failed) in (AllReduce #3|Barrier #4) at faults_worker_test\.go:\d+`, res.stderr)
			assert.NotContains(t, res.stderr, "but never joined", "no healthy rank is behind")
			assertNothingLeft(t, mark, before)
		})
	}
}
