package launch

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// syncBuffer is a bytes.Buffer safe for the agent's writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// agentRun is one ddprun run in this process.
type agentRun struct {
	code           int
	stdout, stderr string
	elapsed        time.Duration
}

// runAgent runs ddprun's args with this test binary as the training
// program running scenario, marked so leftovers can be found.
func runAgent(ctx context.Context, t *testing.T, mark, scenario string, args []string, env ...string) agentRun {
	t.Helper()
	args = append(args, os.Args[0], "-test.run=^$")
	c, err := ParseArgs(args, func(string) string { return "" }, os.Stderr)
	require.NoError(t, err)
	environ := append(os.Environ(), workerEnvName+"="+scenario, "XLADDP_LAUNCH_TEST_MARK="+mark, "MASTER_ADDR=", "MASTER_PORT=",
		"RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "LOCAL_WORLD_SIZE=")
	environ = append(environ, env...)
	var out, errb syncBuffer
	start := time.Now()
	code := Run(ctx, c, environ, &out, &errb)
	return agentRun{code: code, stdout: out.String(), stderr: errb.String(), elapsed: time.Since(start)}
}

// leftovers lists processes carrying mark in their environment, and
// xladdp shared-memory segments in /dev/shm.
func leftovers(t *testing.T, mark string) (procs []string, segments []string) {
	t.Helper()
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err == nil && bytes.Contains(env, []byte("XLADDP_LAUNCH_TEST_MARK="+mark+"\x00")) {
			procs = append(procs, e.Name())
		}
	}
	shm, _ := os.ReadDir("/dev/shm")
	for _, e := range shm {
		if strings.HasPrefix(e.Name(), "xladdp-") {
			segments = append(segments, e.Name())
		}
	}
	return procs, segments
}

// assertNothingLeft checks, within 5 s, that no process of the run
// remains and no segment beyond those present before.
func assertNothingLeft(t *testing.T, mark string, segmentsBefore []string) {
	t.Helper()
	var procs, segs []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		procs, segs = leftovers(t, mark)
		if len(procs) == 0 {
			break
		}
	}
	assert.Empty(t, procs, "processes of the job survived")
	var fresh []string
	for _, s := range segs {
		if !contains(segmentsBefore, s) {
			fresh = append(fresh, s)
		}
	}
	assert.Empty(t, fresh, "shared-memory segments left in /dev/shm")
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func freeTestPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestSeedCommandLines: the seeds' torchrun command lines, with ddprun:
// every worker joins the group and all-reduces.
func TestSeedCommandLines(t *testing.T) {
	port := freeTestPort(t)
	cases := []struct {
		name  string
		args  []string
		procs int
	}{
		{"HPC c10d, endpoint port 0", []string{"--nnodes=1", "--nproc_per_node=2", "--rdzv_id=12345", "--rdzv_backend=c10d", "--rdzv_endpoint=localhost:0"}, 2},
		{"Neuron static", []string{"--nproc_per_node=2", "--nnodes=1", "--node_rank=0", "--master_addr=127.0.0.1", fmt.Sprintf("--master_port=%d", port)}, 2},
		{"nproc_per_node=cpu", []string{"--nproc-per-node=cpu"}, runtime.NumCPU()},
		{"standalone", []string{"--standalone", "--nproc_per_node=3"}, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mark := strconv.FormatInt(time.Now().UnixNano(), 36)
			_, before := leftovers(t, mark)
			res := runAgent(t.Context(), t, mark, "ok", c.args)
			require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
			want := float32(c.procs * (c.procs - 1) / 2)
			for r := range c.procs {
				assert.Contains(t, res.stdout, fmt.Sprintf("[rank%d]:sum %v\n", r, want))
			}
			assertNothingLeft(t, mark, before)
		})
	}
}

// TestWorkerEnvironment: every variable torchrun sets, per worker.
func TestWorkerEnvironment(t *testing.T) {
	res := runAgent(t.Context(), t, "env", "env", []string{"--nproc_per_node=2", "--rdzv_id=job7", "--max_restarts=2", "--role=trainer"})
	require.Equal(t, 0, res.code, res.stderr)
	seen := 0
	for _, line := range strings.Split(res.stdout, "\n") {
		_, js, ok := strings.Cut(line, "]:ENV ")
		if !ok {
			continue
		}
		var env map[string]string
		require.NoError(t, json.Unmarshal([]byte(js), &env))
		r := env["RANK"]
		seen++
		assert.Equal(t, r, env["LOCAL_RANK"])
		assert.Equal(t, r, env["ROLE_RANK"])
		assert.Equal(t, "0", env["GROUP_RANK"])
		assert.Equal(t, "trainer", env["ROLE_NAME"])
		assert.Equal(t, "2", env["WORLD_SIZE"])
		assert.Equal(t, "2", env["LOCAL_WORLD_SIZE"])
		assert.Equal(t, "2", env["ROLE_WORLD_SIZE"])
		assert.Equal(t, "127.0.0.1", env["MASTER_ADDR"])
		assert.NotEmpty(t, env["MASTER_PORT"])
		assert.Equal(t, "0", env["TORCHELASTIC_RESTART_COUNT"])
		assert.Equal(t, "2", env["TORCHELASTIC_MAX_RESTARTS"])
		assert.Equal(t, "job7", env["TORCHELASTIC_RUN_ID"])
		assert.Equal(t, "1", env["OMP_NUM_THREADS"])
		assert.Equal(t, "1", env["XLADDP_BIND_CPUS"])
		assert.True(t, strings.Contains(res.stdout, "[rank"+r+"]:ENV "), "prefix")
	}
	assert.Equal(t, 2, seen)
}

// TestFailurePolicy: a worker that exits non-zero, is killed, or hangs
// stops every worker; ddprun exits with its status and names it, within
// 5 s (the hang: within the collective timeout), and nothing is left.
func TestFailurePolicy(t *testing.T) {
	cases := []struct {
		scenario string
		code     int
		says     []string
		within   time.Duration
	}{
		{"fail", 3, []string{"rank 1 (local rank 1): exit code 3", "rank 1 gives up"}, 5 * time.Second},
		{"kill", 128 + 9, []string{"rank 1 (local rank 1): signal SIGKILL"}, 5 * time.Second},
		// Rank 1 stops (SIGSTOP): the others' collective times out (3 s)
		// and names it.
		{"stop", 4, []string{"exit code 4", "rank 1"}, 15 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.scenario, func(t *testing.T) {
			mark := "fail-" + c.scenario + strconv.FormatInt(time.Now().UnixNano(), 36)
			_, before := leftovers(t, mark)
			res := runAgent(t.Context(), t, mark, c.scenario, []string{"--nproc_per_node=3", "--monitor_interval=0.05"},
				"XLADDP_TEST_TIMEOUT=3s")
			assert.Equal(t, c.code, res.code, "stderr: %s", res.stderr)
			for _, s := range c.says {
				assert.Contains(t, res.stderr, s)
			}
			assert.Less(t, res.elapsed, c.within)
			assertNothingLeft(t, mark, before)
		})
	}
}
