package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/examples/bench/internal/stats"
)

// sizesEnv lists the sizes a child times, in bytes (default: sizes()).
const sizesEnv = "XLADDP_BENCH_SIZES"

func parseSizes(list string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 4 || n%4 != 0 {
			return nil, fmt.Errorf("size %q: want a byte count, a positive multiple of 4", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// compare times, for each process count, the default backend (TCP and
// shared memory, started as ddprun would), ddp's mpi backend and raw
// MPI_Allreduce from C (under mpirun, initialised as the backend does,
// with MPI_THREAD_MULTIPLE, and plainly with MPI_Init), alternating them
// for rounds rounds, and prints the medians and the mpi backend's time
// over raw C's at the same thread level.
func compare(rawC, procList, sizeList string, rounds int, out io.Writer) error {
	if _, err := os.Stat(rawC); err != nil {
		return fmt.Errorf("--compare-mpi: %w (build it: mpicc -O2 -o mpi_allreduce examples/bench/allreduce/c/mpi_allreduce.c)", err)
	}
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		return fmt.Errorf("--compare-mpi needs Open MPI's mpirun: %w", err)
	}
	szs, err := parseSizes(sizeList)
	if err != nil {
		return err
	}
	if rounds < 1 {
		return fmt.Errorf("--rounds %d: want at least 1", rounds)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	c := comparison{rawC: rawC, mpirun: mpirun, self: self, sizeList: sizeList, szs: szs}
	for _, p := range strings.Split(procList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 2 {
			return fmt.Errorf("--procs %q: want counts of at least 2", procList)
		}
		times := map[string]map[int][]float64{"tcp": {}, "mpi": {}, "c": {}, "c-single": {}}
		inJob := map[int][]float64{} // ddp / raw C time, alternated in one job
		for range rounds {
			if err := c.round(n, times, inJob); err != nil {
				return err
			}
		}
		c.print(out, n, rounds, times, inJob)
	}
	return nil
}

// comparison is what --compare-mpi runs: the raw C benchmark, mpirun,
// this binary, and the sizes (as listed and parsed).
type comparison struct {
	rawC, mpirun, self, sizeList string
	szs                          []int
}

// mpirunArgs is mpirun's command line for prog on n processes.
func mpirunArgs(n int, prog ...string) []string {
	args := []string{"--oversubscribe", "-np", strconv.Itoa(n)}
	if os.Geteuid() == 0 {
		args = append(args, "--allow-run-as-root")
	}
	return append(args, prog...)
}

// round runs each contender once on n processes, adding their times per
// size to times and the in-job ratios to inJob.
func (c comparison) round(n int, times map[string]map[int][]float64, inJob map[int][]float64) error {
	tcp, err := launch(n, sizesEnv+"="+c.sizeList)
	if err != nil {
		return fmt.Errorf("tcp backend: %w", err)
	}
	viaMPI, err := timed(exec.Command(c.mpirun, mpirunArgs(n, c.self)...), childEnv+"=1", dist.EnvTransport+"=mpi",
		sizesEnv+"="+c.sizeList, dist.EnvRank+"=", dist.EnvWorldSize+"=", inJobEnv+"=3")
	if err != nil {
		return fmt.Errorf("mpi backend (is this binary built with -tags mpi?): %w", err)
	}
	args := mpirunArgs(n, c.rawC)
	for _, s := range c.szs {
		args = append(args, strconv.Itoa(s))
	}
	raw, err := timed(exec.Command(c.mpirun, args...), "XLADDP_BENCH_MPI_THREADS=multiple")
	if err != nil {
		return fmt.Errorf("raw C MPI_Allreduce: %w", err)
	}
	rawSingle, err := timed(exec.Command(c.mpirun, args...), "XLADDP_BENCH_MPI_THREADS=")
	if err != nil {
		return fmt.Errorf("raw C MPI_Allreduce: %w", err)
	}
	for name, rs := range map[string][]result{"tcp": tcp, "mpi": viaMPI, "c": raw, "c-single": rawSingle} {
		for _, r := range rs {
			times[name][r.Bytes] = append(times[name][r.Bytes], r.Seconds)
		}
	}
	for _, r := range viaMPI {
		for _, pair := range r.InJob {
			inJob[r.Bytes] = append(inJob[r.Bytes], pair[0]/pair[1])
		}
	}
	return nil
}

// print writes the table of n processes' medians over rounds.
func (c comparison) print(out io.Writer, n, rounds int, times map[string]map[int][]float64, inJob map[int][]float64) {
	fmt.Fprintf(out, "\n%d processes, median of %d alternated rounds (bus GB/s, time per all-reduce)\n", n, rounds)
	fmt.Fprintf(out, "%10s | %22s | %22s | %22s | %22s | %s | %s\n", "size", "ddp tcp/shm", "ddp mpi",
		"raw C, THREAD_MULTIPLE", "raw C, MPI_Init", "ddp mpi / raw C (multiple)", "same job: ddp / raw C (median of pairs)")
	for _, s := range c.szs {
		cell := func(name string) (string, float64) {
			sec := stats.Median(times[name][s])
			bus := 2 * float64(n-1) / float64(n) * float64(s) / sec
			return fmt.Sprintf("%8.3f GB/s %10s", bus/1e9, time.Duration(sec*1e9).Round(100*time.Nanosecond)), sec
		}
		tcp, _ := cell("tcp")
		mpi, mpiSec := cell("mpi")
		raw, rawSec := cell("c")
		single, _ := cell("c-single")
		fmt.Fprintf(out, "%10s | %s | %s | %s | %s | %26.3f | %.3f (%d pairs)\n", human(s), tcp, mpi, raw, single, mpiSec/rawSec,
			stats.Median(inJob[s]), len(inJob[s]))
	}
}

// timed runs cmd (a whole job under mpirun) and reads rank 0's results.
func timed(cmd *exec.Cmd, env ...string) ([]result, error) {
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	results := readResults(stdout)
	return results, cmd.Wait()
}

func readResults(r io.Reader) []result {
	var results []result
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var res result
		if err := json.Unmarshal(sc.Bytes(), &res); err == nil && res.Bytes > 0 {
			results = append(results, res)
		}
	}
	return results
}
