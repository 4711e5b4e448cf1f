package workertest

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/xladdp/xladdp/internal/freeport"
	"github.com/xladdp/xladdp/internal/syncbuf"
	"github.com/xladdp/xladdp/internal/workerenv"
)

// Env makes the test binary run a worker scenario as one rank.
const Env = "XLADDP_TEST_WORKER"

// ReportDirEnv, when set, is where a worker also writes its report
// (rank-R.json) and a looping scenario its pid (pid-R): mpirun merges the
// ranks' output, and the test must find a rank to kill.
const ReportDirEnv = "XLADDP_TEST_REPORT_DIR"

// Report is what a worker prints as its last line.
type Report struct {
	Rank     int
	Failures []string
	Hashes   map[string]string
	Error    string
	Elapsed  float64
	// Transport is "shared memory", "tcp" or "mpi"; SharedMemoryAllReduces
	// counts the all-reduces that took the shared-memory path.
	Transport              string
	SharedMemoryAllReduces int64
	// Errors holds one error (or "") per case of a multi-case scenario.
	Errors []string
	// Params are a training scenario's final parameters; BytesToHost
	// what its process copied from devices to the host.
	Params      [][]float32
	BytesToHost int64
	// Losses are a training scenario's per-step losses (replica 0's).
	Losses []float32
	// Counters are a scenario's named counts (gradient syncs, collectives).
	Counters map[string]int64
}

// Rank is this worker's rank as its launcher gave it: $RANK, or Open MPI's.
func Rank() int {
	rank, _ := strconv.Atoi(cmp.Or(os.Getenv(workerenv.Rank), os.Getenv(workerenv.OpenMPIRank)))
	return rank
}

// Main runs m's tests, or, in a re-executed worker, the scenario $Env
// names through run, which returns the process's exit code.
func Main(m *testing.M, run func(scenario string) int) {
	if scenario := os.Getenv(Env); scenario != "" {
		os.Exit(run(scenario))
	}
	os.Exit(m.Run())
}

// Finish prints rep as the worker's last line and, with ReportDirEnv set,
// writes it there too.
func Finish(rep *Report) {
	out, _ := json.Marshal(rep)
	fmt.Println(string(out))
	if dir := os.Getenv(ReportDirEnv); dir != "" {
		_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("rank-%d.json", rep.Rank)), out, 0o644)
	}
}

// Output collects a child's stdout; tests read it while the child runs.
type Output = syncbuf.Buffer

// FreePort is a loopback port free now.
func FreePort(t *testing.T) int {
	port, err := freeport.Pick("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// Launch starts world ranks of scenario (env:// on a free loopback port,
// the debug check off unless env turns it on) and returns their processes
// and outputs (WaitReports reads the reports).
func Launch(t *testing.T, scenario string, world int, env ...string) ([]*exec.Cmd, []*Output) {
	t.Helper()
	port := FreePort(t)
	cmds := make([]*exec.Cmd, world)
	outs := make([]*Output, world)
	for r := range world {
		w := workerenv.Empty()
		w.Rank, w.WorldSize, w.MasterAddr, w.MasterPort = r, world, "127.0.0.1", strconv.Itoa(port)
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(append(os.Environ(), workerenv.Cleared()...), Env+"="+scenario, "XLADDP_DISTRIBUTED_DEBUG=")
		cmd.Env = append(append(cmd.Env, w.Environ()...), env...)
		outs[r] = &Output{}
		cmd.Stdout = outs[r]
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[r] = cmd
	}
	return cmds, outs
}

// WaitReports waits for every rank and reads its report; a rank that
// printed none (killed) gets one whose Error says so.
func WaitReports(t *testing.T, cmds []*exec.Cmd, outs []*Output) []Report {
	t.Helper()
	reps := make([]Report, len(cmds))
	for r, cmd := range cmds {
		_ = cmd.Wait()
		lines := strings.Split(strings.TrimSpace(outs[r].String()), "\n")
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &reps[r]); err != nil {
			reps[r] = Report{Rank: r, Error: fmt.Sprintf("no report (output %q)", outs[r].String())}
		}
	}
	return reps
}
