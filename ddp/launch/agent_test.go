package launch

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/xladdp/xladdp/ddp/internal/workertest"
	"github.com/xladdp/xladdp/internal/freeport"
)

// syncBuffer is a buffer safe for the agent's writers.
type syncBuffer = workertest.Output

// agentRun is one ddprun run in this process.
type agentRun struct {
	code           int
	stdout, stderr string
	elapsed        time.Duration
	// tmp is the job's $TMPDIR, where ddprun's own flight directories go.
	tmp string
}

// flightDirsLeft lists ddprun's temporary flight directories the job
// left in its $TMPDIR.
func (r agentRun) flightDirsLeft() []string {
	dirs, _ := filepath.Glob(filepath.Join(r.tmp, "ddprun-flight-*"))
	return dirs
}

// runAgent runs ddprun's args with this test binary as the training
// program running scenario, marked so leftovers can be found.
func runAgent(ctx context.Context, t *testing.T, mark, scenario string, args []string, env ...string) agentRun {
	t.Helper()
	return runAgentWith(ctx, t, mark, scenario, args, nil, env...)
}

// runAgentWith is runAgent with the parsed config changed by edit first.
func runAgentWith(ctx context.Context, t *testing.T, mark, scenario string, args []string, edit func(*Config),
	env ...string) agentRun {
	t.Helper()
	args = append(args, os.Args[0], "-test.run=^$")
	c, err := ParseArgs(args, func(string) string { return "" }, os.Stderr)
	require.NoError(t, err)
	if edit != nil {
		edit(&c)
	}
	environ := append(os.Environ(), workerEnvName+"="+scenario, "XLADDP_LAUNCH_TEST_MARK="+mark, "MASTER_ADDR=", "MASTER_PORT=",
		"RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "LOCAL_WORLD_SIZE=")
	// ddprun's temporary flight directories go to the test's own TMPDIR:
	// the tests leave none behind, and can see which stay.
	tmp := t.TempDir()
	environ = append(append(environ, "TMPDIR="+tmp), env...)
	var out, errb syncBuffer
	start := time.Now()
	code := Run(ctx, c, environ, &out, &errb)
	return agentRun{code: code, stdout: out.String(), stderr: errb.String(), elapsed: time.Since(start), tmp: tmp}
}

// leftovers lists processes carrying mark in their environment, and
// xladdp shared-memory segments in /dev/shm whose creator is gone.
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
	// A segment is a leftover once its creator (named in it) is gone:
	// other packages' tests create and unlink theirs meanwhile.
	shm, _ := os.ReadDir("/dev/shm")
	for _, e := range shm {
		rest, ok := strings.CutPrefix(e.Name(), "xladdp-")
		pid, _, _ := strings.Cut(rest, "-")
		if _, err := os.Stat(filepath.Join("/proc", pid)); ok && err != nil {
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

// freeTestPort is a loopback port free now, outside the ephemeral range.
func freeTestPort(t *testing.T) int {
	t.Helper()
	port, err := freeport.Pick("127.0.0.1")
	require.NoError(t, err)
	return port
}

// runTwoAgents runs two agents at once in this process, with args(n) for
// node n, the second stagger after the first, and returns their runs.
func runTwoAgents(t *testing.T, mark, scenario string, stagger time.Duration, args func(n int) []string, env ...string) []agentRun {
	t.Helper()
	results := make([]agentRun, 2)
	var wg sync.WaitGroup
	for n := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(n) * stagger)
			results[n] = runAgent(t.Context(), t, mark, scenario, args(n), env...)
		}()
	}
	wg.Wait()
	return results
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
			if strings.Contains(strings.Join(c.args, " "), "localhost:0") {
				assert.Regexp(t, `ddprun: rendezvous endpoint localhost:\d+`, res.stderr, "the chosen port is printed")
			}
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
	res := runAgent(t.Context(), t, "env", "env", []string{"--nproc_per_node=2", "--rdzv_id=job7", "--max_restarts=2", "--role=trainer",
		"--timeout=90"})
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
		assert.Equal(t, "1m30s", env["XLADDP_TIMEOUT"], "--timeout, which the process group reads")
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
		// Each names, from the workers' flight records, where every rank
		// stopped.
		{"fail", 3, []string{"rank 1 (local rank 1): exit code 3", "rank 1 gives up",
			"rank 1 finished AllReduce #1 but never joined #2; its last call was worker_test.go:"}, 5 * time.Second},
		{"kill", 128 + 9, []string{"rank 1 (local rank 1): signal SIGKILL", "flight record", "rank 1 left no flight dump",
			" in AllReduce #2 at worker_test.go:"}, 5 * time.Second},
		// Rank 1 fails leaving a child that holds its stdout and stderr
		// (in its process group, or escaped from it with setsid): the
		// failure is seen at once, not when the child ends (40 s).
		// Which failure is named first can go either way under load (rank
		// 1's exit, or a peer's that saw its connection close): the point
		// is that the job goes down at once.
		{"orphan", 0, []string{"rank 1"}, 5 * time.Second},
		{"orphan-setsid", 0, []string{"rank 1"}, 5 * time.Second},
		// Rank 1 stops (SIGSTOP): the others' collective times out (3 s)
		// and names it.
		// ddprun continues it (SIGCONT) to ask for its flight record.
		{"stop", 4, []string{"exit code 4", "rank 1 is stopped (pid ", "and has not finished AllReduce #2"}, 15 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.scenario, func(t *testing.T) {
			mark := "fail-" + c.scenario + strconv.FormatInt(time.Now().UnixNano(), 36)
			_, before := leftovers(t, mark)
			res := runAgent(t.Context(), t, mark, c.scenario, []string{"--nproc_per_node=3", "--monitor_interval=0.05"},
				"XLADDP_TEST_TIMEOUT=3s")
			if c.code != 0 {
				assert.Equal(t, c.code, res.code, "stderr: %s", res.stderr)
			} else {
				assert.Contains(t, []int{3, 4}, res.code, "stderr: %s", res.stderr)
			}
			for _, s := range c.says {
				assert.Contains(t, res.stderr, s)
			}
			for _, line := range strings.Split(res.stderr, "\n") {
				if strings.Contains(line, "flight record") {
					t.Log(line)
				}
			}
			assert.Less(t, res.elapsed, c.within)
			if c.scenario == "orphan-setsid" {
				// It left the worker's process group: not ddprun's to
				// stop (nor torchrun's); the test cleans it up.
				procs, _ := leftovers(t, mark)
				for _, pid := range procs {
					n, _ := strconv.Atoi(pid)
					_ = syscall.Kill(n, syscall.SIGKILL)
				}
			}
			assertNothingLeft(t, mark, before)
		})
	}
}

// TestRestartResumesBitIdentical: rank 1 is SIGKILLed at step 12 of 20 on
// the first attempt; with --max_restarts=1 the group restarts
// (TORCHELASTIC_RESTART_COUNT=1), resumes from the step-10 checkpoint and
// ends with the parameters of an uninterrupted run, bit for bit. Without
// restarts the same kill fails the job.
func TestRestartResumesBitIdentical(t *testing.T) {
	whole := runAgent(t.Context(), t, "whole", "train", []string{"--nproc_per_node=2"}, "XLADDP_TEST_DIR="+t.TempDir())
	require.Equal(t, 0, whole.code, whole.stderr)
	want := finalParams(whole.stdout)
	require.NotEmpty(t, want)

	mark := "restart" + strconv.FormatInt(time.Now().UnixNano(), 36)
	_, before := leftovers(t, mark)
	res := runAgent(t.Context(), t, mark, "train", []string{"--nproc_per_node=2", "--max_restarts=1"},
		"XLADDP_TEST_DIR="+t.TempDir(), "XLADDP_TEST_KILL=1")
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stderr, "signal SIGKILL")
	assert.Contains(t, res.stderr, "restarting (restart 1 of 1)")
	assert.Contains(t, res.stdout, "[rank0]:resumed at 10")
	assert.Equal(t, want, finalParams(res.stdout), "the restarted job's parameters differ from an uninterrupted run's")
	assertNothingLeft(t, mark, before)

	res = runAgent(t.Context(), t, mark, "train", []string{"--nproc_per_node=2"}, "XLADDP_TEST_DIR="+t.TempDir(), "XLADDP_TEST_KILL=1")
	assert.Equal(t, 128+9, res.code)
	assertNothingLeft(t, mark, before)
}

// TestStopStopsEveryWorker: ending ddprun's ctx (SIGINT/SIGTERM in the
// command) stops every worker at once and exits 130.
func TestStopStopsEveryWorker(t *testing.T) {
	mark := "signal" + strconv.FormatInt(time.Now().UnixNano(), 36)
	_, before := leftovers(t, mark)
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(time.Second, cancel)
	// "stop-wait": every rank waits in a collective that never completes.
	res := runAgent(ctx, t, mark, "hang", []string{"--nproc_per_node=2"}, "XLADDP_TEST_TIMEOUT=60s")
	assert.Equal(t, 130, res.code, res.stderr)
	assert.Less(t, res.elapsed, 6*time.Second)
	assertNothingLeft(t, mark, before)
}

// TestTwoNodesOneHost: two agents on this host, 2 workers each, meet at
// the rendezvous (c10d: ranks by arrival; static: --node_rank) and run one
// world of 4.
func TestTwoNodesOneHost(t *testing.T) {
	for _, backend := range []string{"c10d", "static"} {
		t.Run(backend, func(t *testing.T) {
			port := freeTestPort(t)
			mark := "two" + backend + strconv.FormatInt(time.Now().UnixNano(), 36)
			_, before := leftovers(t, mark)
			results := runTwoAgents(t, mark, "ok", 0, func(n int) []string {
				args := []string{"--nnodes=2", "--nproc_per_node=2", "--rdzv_id=two", "--monitor_interval=0.05"}
				if backend == "c10d" {
					return append(args, "--rdzv_backend=c10d", fmt.Sprintf("--rdzv_endpoint=127.0.0.1:%d", port))
				}
				return append(args, fmt.Sprintf("--node_rank=%d", n), "--master_addr=127.0.0.1", fmt.Sprintf("--master_port=%d", port))
			})
			all := results[0].stdout + results[1].stdout
			for n, r := range results {
				assert.Equal(t, 0, r.code, "agent %d: %s", n, r.stderr)
			}
			for rank := range 4 {
				assert.Contains(t, all, fmt.Sprintf("[rank%d]:sum 6\n", rank))
			}
			assertNothingLeft(t, mark, before)
		})
	}
}

// TestTwoNodesFailTogether: a worker failing on one node (exit code, or
// SIGKILL) stops the other node's workers too, well before the 60 s
// collective timeout (about 3 s alone; the bound leaves a loaded machine
// room); both agents exit non-zero naming it, and nothing is left.
func TestTwoNodesFailTogether(t *testing.T) {
	cases := []struct {
		scenario, says string
		code           int
	}{
		{"fail", "node 0, rank 1 (local rank 1): exit code 3", 3},
		{"kill", "node 0, rank 1 (local rank 1): signal SIGKILL", 128 + 9},
	}
	for _, c := range cases {
		t.Run(c.scenario, func(t *testing.T) {
			port := freeTestPort(t)
			mark := "two" + c.scenario + strconv.FormatInt(time.Now().UnixNano(), 36)
			_, before := leftovers(t, mark)
			results := runTwoAgents(t, mark, c.scenario, 0, func(n int) []string {
				return []string{"--nnodes=2", "--nproc_per_node=2", fmt.Sprintf("--node_rank=%d", n),
					"--master_addr=127.0.0.1", fmt.Sprintf("--master_port=%d", port), "--monitor_interval=0.05"}
			}, "XLADDP_TEST_TIMEOUT=60s")
			// Rank 1 is node 0's local rank 1.
			assert.Equal(t, c.code, results[0].code, results[0].stderr)
			assert.Equal(t, 1, results[1].code, results[1].stderr)
			for n, r := range results {
				assert.Contains(t, r.stderr, c.says, "agent %d", n)
				assert.Less(t, r.elapsed, 30*time.Second, "agent %d: not the collective timeout", n)
			}
			assertNothingLeft(t, mark, before)
		})
	}
}

// TestLongLostAgent: an agent killed with SIGKILL takes its workers with
// it (they die with their parent), and the other node's agent stops its
// own workers and exits non-zero within the heartbeat timeout (which it
// waits out: make test-long).
func TestLongLostAgent(t *testing.T) {
	t.Parallel() // mostly waiting for the heartbeat timeout, on a port of its own
	ddprun := buildDdprun(t)
	port := freeTestPort(t)
	mark := "lost" + strconv.FormatInt(time.Now().UnixNano(), 36)
	_, before := leftovers(t, mark)
	cmds := make([]*exec.Cmd, 2)
	outs := make([]syncBuffer, 2)
	for n := range 2 {
		cmd := exec.Command(ddprun, "--nnodes=2", "--nproc_per_node=2", fmt.Sprintf("--node_rank=%d", n), "--master_addr=127.0.0.1",
			fmt.Sprintf("--master_port=%d", port), "--monitor_interval=0.05", os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), workerEnvName+"=hang", "XLADDP_LAUNCH_TEST_MARK="+mark, "XLADDP_TEST_TIMEOUT=60s",
			"RANK=", "WORLD_SIZE=", "MASTER_ADDR=", "MASTER_PORT=")
		cmd.Stdout, cmd.Stderr = &outs[n], &outs[n]
		require.NoError(t, cmd.Start())
		cmds[n] = cmd
	}
	// Wait until all four workers are in their collective.
	require.Eventually(t, func() bool {
		return strings.Count(outs[0].String()+outs[1].String(), "]:sum 6") == 4
	}, 20*time.Second, 20*time.Millisecond)
	killed := time.Now()
	require.NoError(t, cmds[1].Process.Kill())
	_ = cmds[1].Wait()
	err := cmds[0].Wait()
	assert.Error(t, err, "the surviving agent must fail")
	assert.Less(t, time.Since(killed), heartbeatTimeout+5*time.Second)
	t.Logf("surviving agent: %s", outs[0].String())
	assertNothingLeft(t, mark, before)
}

// TestRendezvousConflicts: two nodes claiming one rank, or a rank beyond
// --nnodes, fail every agent promptly, naming the problem.
func TestRendezvousConflicts(t *testing.T) {
	cases := []struct {
		name  string
		ranks [2]int
		says  string
	}{
		{"same node rank", [2]int{0, 0}, "node rank 0 claimed by two nodes"},
		{"rank beyond nnodes", [2]int{0, 5}, "node rank 5 with --nnodes=2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			port := freeTestPort(t)
			// Node 1 starts late: node 0 hosts the store.
			results := runTwoAgents(t, "conflict", "ok", 200*time.Millisecond, func(n int) []string {
				return []string{"--nnodes=2", "--nproc_per_node=1", fmt.Sprintf("--node_rank=%d", c.ranks[n]),
					"--master_addr=127.0.0.1", fmt.Sprintf("--master_port=%d", port), "--rdzv_conf=timeout=20"}
			})
			for n, r := range results {
				assert.Equal(t, 1, r.code, "agent %d", n)
				assert.Contains(t, r.stderr, c.says, "agent %d", n)
				assert.Less(t, r.elapsed, 5*time.Second, "agent %d", n)
			}
		})
	}
}

// TestUnderMpirun: under Open MPI's mpirun each process is a worker
// itself: dist.Init takes rank, world and local rank from OMPI_COMM_WORLD_*
// and, with every rank on this host, rendezvouses on loopback.
func TestUnderMpirun(t *testing.T) {
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("mpirun not found: install Debian's openmpi-bin (make deps does, as root)")
	}
	cmd := exec.CommandContext(t.Context(), mpirun, "-np", "4", "--oversubscribe", os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), workerEnvName+"=ok", "RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "LOCAL_WORLD_SIZE=",
		"MASTER_ADDR=", "MASTER_PORT=", "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Equal(t, 4, strings.Count(string(out), "sum 6\n"), "%s", out)
}

// TestLogFiles: --log_dir with --redirects (log file only) and --tee (log
// file and console) per stream, and --local_ranks_filter on the console.
func TestLogFiles(t *testing.T) {
	dir := t.TempDir()
	res := runAgent(t.Context(), t, "logs", "stderr", []string{"--nproc_per_node=2", "--log_dir=" + dir, "--redirects=2", "--tee=1",
		"--local_ranks_filter=1", "--rdzv_id=logs"})
	require.Equal(t, 0, res.code, res.stderr)
	// Console: rank 1's stdout only (tee), no stderr (redirected), no rank 0.
	assert.Contains(t, res.stdout, "[rank1]:to stdout")
	assert.NotContains(t, res.stdout, "[rank0]")
	assert.NotContains(t, res.stderr, "to stderr")
	for lr := range 2 {
		base := filepath.Join(dir, "logs", "attempt_0", strconv.Itoa(lr))
		out, err := os.ReadFile(filepath.Join(base, "stdout.log"))
		require.NoError(t, err)
		assert.Equal(t, "to stdout\n", string(out), "local rank %d", lr)
		errLog, err := os.ReadFile(filepath.Join(base, "stderr.log"))
		require.NoError(t, err)
		assert.Equal(t, "to stderr\n", string(errLog), "local rank %d", lr)
	}
}

// TestElasticNodeRange: with --nnodes=1:2 and one node, the rendezvous
// closes after join_timeout with the nodes it has, and the job runs.
func TestElasticNodeRange(t *testing.T) {
	port := freeTestPort(t)
	res := runAgent(t.Context(), t, "elastic", "ok", []string{"--nnodes=1:2", "--nproc_per_node=2", "--rdzv_backend=c10d",
		fmt.Sprintf("--rdzv_endpoint=127.0.0.1:%d", port), "--rdzv_conf=join_timeout=1,timeout=30"})
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stdout, "[rank1]:sum 1\n")
	assert.GreaterOrEqual(t, res.elapsed, time.Second, "closed before join_timeout")
}

// TestElasticClosesAfterLastCall: with --nnodes=1:2 and one node, the
// rendezvous closes last_call_timeout after the minimum joined, as
// torchrun's does, not after join_timeout (600 s by default).
func TestElasticClosesAfterLastCall(t *testing.T) {
	port := freeTestPort(t)
	res := runAgent(t.Context(), t, "last-call", "ok", []string{"--nnodes=1:2", "--nproc_per_node=2", "--rdzv_backend=c10d",
		fmt.Sprintf("--rdzv_endpoint=127.0.0.1:%d", port), "--rdzv_conf=last_call_timeout=1,join_timeout=60"})
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stdout, "[rank1]:sum 1\n")
	assert.GreaterOrEqual(t, res.elapsed, time.Second, "closed before last_call_timeout")
	assert.Less(t, res.elapsed, 15*time.Second, "waited for join_timeout")
}

// TestRendezvousSaysWhatItWaitsFor: a rendezvous still waiting prints a
// line every ReportInterval naming what it waits for, and one short of
// its minimum fails at join_timeout naming the count.
func TestRendezvousSaysWhatItWaitsFor(t *testing.T) {
	every := func(c *Config) { c.ReportInterval = 200 * time.Millisecond }
	t.Run("c10d", func(t *testing.T) {
		port := freeTestPort(t)
		res := runAgentWith(t.Context(), t, "report-c10d", "ok", []string{"--nnodes=2:3", "--nproc_per_node=1",
			"--rdzv_backend=c10d", fmt.Sprintf("--rdzv_endpoint=127.0.0.1:%d", port), "--rdzv_conf=join_timeout=1.5"}, every)
		assert.Equal(t, 1, res.code)
		assert.Contains(t, res.stderr, fmt.Sprintf("ddprun: rendezvous: still waiting after 0s: 1 of --nnodes=2:3 nodes joined at 127.0.0.1:%d (this is node 0)", port))
		assert.Contains(t, res.stderr, "1 of the 2 nodes needed joined within join_timeout (1.5s)")
		assert.Less(t, res.elapsed, 10*time.Second)
	})
	t.Run("static", func(t *testing.T) {
		port := freeTestPort(t)
		ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
		defer cancel()
		res := runAgentWith(ctx, t, "report-static", "ok", []string{"--nnodes=2", "--node_rank=1", "--nproc_per_node=1",
			"--master_addr=127.0.0.1", fmt.Sprintf("--master_port=%d", port)}, every)
		assert.NotEqual(t, 0, res.code)
		assert.Contains(t, res.stderr, fmt.Sprintf("cannot reach node 0's rendezvous store (--master_addr:--master_port; "+
			"is ddprun --node_rank=0 running there?) at 127.0.0.1:%d yet", port))
	})
}

// TestCompileOnlyFillsTheCache: `ddprun --compile_only` runs the 4-worker
// training with nothing executed (parameters read zeros) and every
// program compiled into XLADDP_CACHE_DIR, once job-wide (every rank's
// metrics summed); the real run that follows compiles nothing and ends
// with the parameters of a run that compiled everything itself, bit for
// bit.
func TestCompileOnlyFillsTheCache(t *testing.T) {
	line := func(out, prefix string) string {
		for _, l := range strings.Split(out, "\n") {
			if _, rest, ok := strings.Cut(l, "]:"+prefix+" "); ok {
				return rest
			}
		}
		return ""
	}
	// jobMetrics sums every rank's metrics: the job's.
	type jobMetrics struct{ compiled, hits, executions, skipped, ranks int }
	sum := func(out string) (m jobMetrics) {
		for _, l := range strings.Split(out, "\n") {
			if _, rest, ok := strings.Cut(l, "]:METRICS "); ok {
				var c, h, e, s int
				_, err := fmt.Sscanf(rest, "compilations=%d persistent=%d executions=%d skipped=%d", &c, &h, &e, &s)
				require.NoError(t, err, l)
				m = jobMetrics{m.compiled + c, m.hits + h, m.executions + e, m.skipped + s, m.ranks + 1}
			}
		}
		return m
	}
	reference := runAgent(t.Context(), t, "compile-ref", "train", []string{"--nproc_per_node=4"},
		"XLADDP_TEST_DIR="+t.TempDir(), "XLADDP_CACHE_DIR="+t.TempDir())
	require.Equal(t, 0, reference.code, reference.stderr)
	want := line(reference.stdout, "PARAMS")
	require.NotEmpty(t, want)

	// 4 ranks from a cold cache compile each distinct program once
	// between them.
	cache := t.TempDir()
	pass := runAgent(t.Context(), t, "compile-pass", "train", []string{"--nproc_per_node=4", "--compile-only"},
		"XLADDP_TEST_DIR="+t.TempDir(), "XLADDP_CACHE_DIR="+cache)
	require.Equal(t, 0, pass.code, pass.stderr)
	programs, err := filepath.Glob(filepath.Join(cache, "*.xlaexec"))
	require.NoError(t, err)
	m := sum(pass.stdout)
	require.Equal(t, 4, m.ranks, pass.stdout)
	assert.Positive(t, len(programs))
	assert.Equal(t, len(programs), m.compiled, "exactly U compilations job-wide (U = distinct programs), not N×U")
	assert.Zero(t, m.executions, "the compile-only pass executes nothing")
	assert.Positive(t, m.skipped)
	for _, v := range strings.Fields(strings.NewReplacer("[", " ", "]", " ").Replace(line(pass.stdout, "PARAMS"))) {
		assert.Equal(t, "0", v, "values read zeros in the compile-only pass")
	}

	real := runAgent(t.Context(), t, "compile-real", "train", []string{"--nproc_per_node=4"},
		"XLADDP_TEST_DIR="+t.TempDir(), "XLADDP_CACHE_DIR="+cache)
	require.Equal(t, 0, real.code, real.stderr)
	m = sum(real.stdout)
	assert.Zero(t, m.compiled, "the real run finds every program in the cache")
	assert.Equal(t, 4*len(programs), m.hits, "every rank loads every program")
	assert.Positive(t, m.executions)
	assert.Equal(t, want, line(real.stdout, "PARAMS"), "the cached programs compute what freshly compiled ones do")
}

// TestElasticLateNodeIsAdmittedByARestart: with --nnodes=1:2 and
// --max_restarts=0, a node that arrives after the rendezvous closed with
// one waits, saying so; the running job's agent restarts it to admit the
// node, its worker checkpointing on SIGTERM (exit 75), without counting
// a restart; the job's second round runs on both nodes (world 2), the
// late node's worker told the job's restart count as the others.
func TestElasticLateNodeIsAdmittedByARestart(t *testing.T) {
	port := freeTestPort(t)
	args := []string{"--nnodes=1:2", "--nproc_per_node=1", "--rdzv_backend=c10d", "--max_restarts=0",
		fmt.Sprintf("--rdzv_endpoint=127.0.0.1:%d", port), "--rdzv_conf=last_call_timeout=0.5,join_timeout=30"}
	first := make(chan agentRun, 1)
	go func() { first <- runAgent(t.Context(), t, "admit-first", "checkpoint-on-term", args) }()
	time.Sleep(1500 * time.Millisecond) // closed after the last call: round 0 runs alone
	start := time.Now()
	late := runAgent(t.Context(), t, "admit-second", "checkpoint-on-term", args)
	res := <-first
	require.Equal(t, 0, late.code, late.stderr)
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, late.stderr, "waiting to join at its next membership change")
	assert.Contains(t, res.stdout, "round 0: world 1")
	assert.Contains(t, res.stdout, "checkpointed")
	assert.Contains(t, res.stderr, "1 node(s) waiting to join")
	assert.Contains(t, res.stderr, "not counted against --max_restarts")
	assert.Contains(t, res.stdout, "round 1: world 2")
	assert.Contains(t, late.stdout, "round 1: world 2")
	assert.NotContains(t, late.stdout, "round 0")
	assert.Less(t, time.Since(start), 10*time.Second, "admitted within a few monitor intervals, not at a timeout")
}

// TestElasticSpareNodeWaitsAndIsTold: a node beyond --nnodes=1:2's
// largest count waits as a spare (for a restart after a lost node); when
// the job ends without one, it fails saying so, and the job itself is
// not disturbed.
func TestElasticSpareNodeWaitsAndIsTold(t *testing.T) {
	port := freeTestPort(t)
	args := []string{"--nnodes=1:2", "--nproc_per_node=1", "--rdzv_backend=c10d",
		fmt.Sprintf("--rdzv_endpoint=127.0.0.1:%d", port), "--rdzv_conf=last_call_timeout=5,join_timeout=30,timeout=20"}
	runs := make(chan agentRun, 2)
	go func() { runs <- runAgent(t.Context(), t, "spare-first", "nogroup-sleep", args, "XLADDP_TEST_SLEEP=4s") }()
	time.Sleep(300 * time.Millisecond) // node 0 hosts the store
	go func() {
		runs <- runAgent(t.Context(), t, "spare-second", "nogroup-sleep", args, "XLADDP_TEST_SLEEP=4s")
	}()
	time.Sleep(700 * time.Millisecond) // closed at two, the largest count; the workers sleep 4 s
	spare := runAgent(t.Context(), t, "spare-third", "nogroup-sleep", args)
	for range 2 {
		res := <-runs
		require.Equal(t, 0, res.code, res.stderr)
		assert.Contains(t, res.stdout, "awake")
	}
	assert.Equal(t, 1, spare.code, spare.stderr)
	assert.Contains(t, spare.stderr, "waiting to join at its next membership change")
	assert.Regexp(t, "the job ended or its store is gone before a restart admitted this node|did not restart within the rendezvous timeout", spare.stderr)
}

// TestElasticStoreHostLostEndsWithinSeconds: when the agent hosting the
// c10d store dies (kill -9), another node's agent restarts, finds the
// store still gone and ends within seconds, saying what to do, instead of
// waiting out the rendezvous timeout.
func TestElasticStoreHostLostEndsWithinSeconds(t *testing.T) {
	t.Parallel() // mostly waiting, on ports of its own
	bin := buildDdprun(t)
	port := freeTestPort(t)
	endpoint := fmt.Sprintf("127.0.0.1:%d", port)
	args := []string{"--nnodes=1:2", "--nproc_per_node=1", "--rdzv_backend=c10d", "--max_restarts=2", "--rdzv_endpoint=" + endpoint,
		"--rdzv_conf=last_call_timeout=1"}
	host := exec.Command(bin, append(args, "/bin/sleep", "60")...)
	require.NoError(t, host.Start())
	t.Cleanup(func() { _ = host.Process.Kill(); _ = host.Wait() })
	require.Eventually(t, func() bool {
		c, err := net.DialTimeout("tcp", endpoint, 100*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, 30*time.Second, 20*time.Millisecond, "the store's host never listened")
	go func() {
		time.Sleep(3 * time.Second) // the round runs on both nodes
		_ = host.Process.Kill()
	}()
	start := time.Now()
	res := runAgent(t.Context(), t, "store-lost", "nogroup-sleep", args, "XLADDP_TEST_SLEEP=60s")
	assert.Equal(t, 1, res.code, res.stderr)
	assert.Contains(t, res.stderr, "the rendezvous store at "+endpoint+" is gone")
	assert.Contains(t, res.stderr, "is still gone after 10s")
	assert.Contains(t, res.stderr, "start ddprun again on the nodes that are left")
	assert.Less(t, time.Since(start), 30*time.Second, "not the rendezvous timeout")
}
