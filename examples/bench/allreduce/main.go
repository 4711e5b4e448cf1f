// Command allreduce measures ddp's all-reduce bus bandwidth across local
// processes, next to this machine's single-core memory-copy and loopback
// TCP bandwidth measured in the same run.
//
//	go run ./examples/bench/allreduce --procs 2,4
//
// Bus bandwidth is 2(n-1)/n × bytes / time, what a ring moves per rank, so
// it compares across process counts and with the physical limits.
//
// With --compare-mpi, built with -tags mpi, it sets the mpi backend (under
// mpirun) beside the default backend and raw MPI_Allreduce from C (the
// program in c/, built with mpicc), their runs alternated (compare.go):
//
//	go build -tags mpi -o benchallreduce ./examples/bench/allreduce
//	mpicc -O2 -o mpi_allreduce examples/bench/allreduce/c/mpi_allreduce.c
//	./benchallreduce --compare-mpi ./mpi_allreduce --procs 2,4 --rounds 5
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/internal/cli"
	"github.com/xladdp/xladdp/internal/freeport"
)

const childEnv = "XLADDP_BENCH_CHILD"

type result struct {
	Bytes   int
	Seconds float64 // per all-reduce of an ordinary Go buffer
	// SharedSeconds is per all-reduce of a ddp.SharedBuffer (in place
	// through shared memory; 0 when the group has none).
	SharedSeconds float64
	// InJob are alternated pairs, in one mpi-backend job, of ddp's time
	// and raw MPI_Allreduce's from C on the same buffer (rawAllreduce).
	InJob [][2]float64 `json:",omitempty"`
}

// rawAllreduce times raw MPI_Allreduce from C in this process (set in
// builds with -tags mpi: compare_mpi.go).
var rawAllreduce func(buf []float32) float64

// inJobEnv asks a child of the mpi backend for this many alternated
// pairs of ddp's and raw C's all-reduce per size.
const inJobEnv = "XLADDP_BENCH_IN_JOB"

func main() {
	if os.Getenv(childEnv) == "1" {
		if err := child(); err != nil {
			fmt.Fprintln(os.Stderr, "allreduce bench rank", os.Getenv(dist.EnvRank)+":", err)
			os.Exit(1)
		}
		return
	}
	flags := pflag.NewFlagSet("allreduce", pflag.ContinueOnError)
	procs := flags.String("procs", "2,4", "comma-separated process counts")
	maxMiB := flags.Int("max-mib", 256, "largest buffer in MiB")
	compareWith := flags.String("compare-mpi", "", "raw C MPI_Allreduce program (c/mpi_allreduce.c, built): compare the backends with it")
	rounds := flags.Int("rounds", 5, "with --compare-mpi: alternated rounds of each")
	sizeList := flags.String("sizes", "4096,1048576,67108864", "with --compare-mpi: buffer sizes in bytes")
	err := flags.Parse(os.Args[1:])
	if err == nil && *compareWith != "" {
		err = compare(*compareWith, *procs, *sizeList, *rounds, os.Stdout)
	} else if err == nil {
		err = run(*procs, *maxMiB, os.Stdout)
	}
	cli.Exit("allreduce bench", err)
}

func sizes(maxMiB int) []int {
	var out []int
	for s := 4 << 10; s <= maxMiB<<20; s *= 4 {
		out = append(out, s)
	}
	return out
}

func run(procList string, maxMiB int, out io.Writer) error {
	memcpy := memcpyBandwidth()
	tcp, err := loopbackBandwidth()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "single-core memcpy: %.2f GB/s; loopback TCP (one stream): %.2f GB/s\n", memcpy/1e9, tcp/1e9)
	for _, p := range strings.Split(procList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 2 {
			return fmt.Errorf("--procs %q: want counts of at least 2", procList)
		}
		results, err := launch(n, fmt.Sprintf("XLADDP_BENCH_MAX_MIB=%d", maxMiB))
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "\n%d processes: Go buffers | SharedBuffer (in place)\n%10s %12s %10s %9s | %12s %10s %9s\n",
			n, "size", "time", "bus GB/s", "% memcpy", "time", "bus GB/s", "% memcpy")
		for _, r := range results {
			bus := func(sec float64) float64 { return 2 * float64(n-1) / float64(n) * float64(r.Bytes) / sec }
			shared := fmt.Sprintf("%12s %10s %9s", "-", "-", "-")
			if r.SharedSeconds > 0 {
				shared = fmt.Sprintf("%12s %10.2f %8.1f%%", time.Duration(r.SharedSeconds*1e9).Round(time.Microsecond),
					bus(r.SharedSeconds)/1e9, 100*bus(r.SharedSeconds)/memcpy)
			}
			fmt.Fprintf(out, "%10s %12s %10.2f %8.1f%% | %s\n", human(r.Bytes),
				time.Duration(r.Seconds*1e9).Round(time.Microsecond), bus(r.Seconds)/1e9, 100*bus(r.Seconds)/memcpy, shared)
		}
	}
	return nil
}

func human(b int) string {
	if b >= 1<<20 {
		return fmt.Sprintf("%d MiB", b>>20)
	}
	return fmt.Sprintf("%d KiB", b>>10)
}

// memcpyBandwidth copies 64 MiB repeatedly on one core.
func memcpyBandwidth() float64 {
	const size = 64 << 20
	src, dst := make([]byte, size), make([]byte, size)
	for i := range src {
		src[i] = byte(i)
	}
	copy(dst, src)
	start := time.Now()
	const reps = 20
	for range reps {
		copy(dst, src)
	}
	return reps * size / time.Since(start).Seconds()
}

// loopbackBandwidth streams 512 MiB over one loopback TCP connection.
func loopbackBandwidth() (float64, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		_, err = io.Copy(io.Discard, c)
		done <- err
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return 0, err
	}
	buf := make([]byte, 4<<20)
	start := time.Now()
	for range 128 {
		if _, err := c.Write(buf); err != nil {
			return 0, err
		}
	}
	c.Close()
	if err := <-done; err != nil {
		return 0, err
	}
	return 128 * float64(len(buf)) / time.Since(start).Seconds(), nil
}

// launch runs n ranks of the default backend, started as ddprun would,
// with env added, and returns rank 0's results.
func launch(n int, env ...string) ([]result, error) {
	port, err := freeport.Pick("127.0.0.1")
	if err != nil {
		return nil, err
	}
	cmds := make([]*exec.Cmd, n)
	var rank0 io.ReadCloser
	for r := range n {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), childEnv+"=1", fmt.Sprintf("%s=%d", dist.EnvRank, r), fmt.Sprintf("%s=%d", dist.EnvWorldSize, n),
			dist.EnvMasterAddr+"=127.0.0.1", fmt.Sprintf("%s=%d", dist.EnvMasterPort, port), dist.EnvTransport+"=tcp")
		cmd.Env = append(cmd.Env, env...)
		cmd.Stderr = os.Stderr
		if r == 0 {
			if rank0, err = cmd.StdoutPipe(); err != nil {
				return nil, err
			}
		}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		cmds[r] = cmd
	}
	results := readResults(rank0)
	for r, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			return nil, fmt.Errorf("rank %d: %w", r, err)
		}
	}
	return results, nil
}

// child is one rank: it all-reduces each size until about 0.5 s has passed
// (at least 3 times) and rank 0 prints the mean time per all-reduce.
func child() error {
	ctx := context.Background()
	o := dist.NewOptions()
	o.Timeout = 2 * time.Minute
	g, err := dist.InitProcessGroup(ctx, o)
	if err != nil {
		return err
	}
	defer g.Destroy()
	maxMiB, _ := strconv.Atoi(os.Getenv("XLADDP_BENCH_MAX_MIB"))
	todo := sizes(maxMiB)
	if list := os.Getenv(sizesEnv); list != "" {
		if todo, err = parseSizes(list); err != nil {
			return err
		}
	}
	for _, size := range todo {
		buf := make([]float32, size/4)
		for i := range buf {
			buf[i] = 1
		}
		plain, err := timeAllReduce(ctx, g, dist.Float32s(buf))
		if err != nil {
			return err
		}
		var sharedSec float64
		if shared, err := g.SharedBuffer(dist.Float32, size/4); err == nil && g.HasSharedMemory() && size <= 64<<20 {
			if sharedSec, err = timeAllReduce(ctx, g, shared); err != nil {
				return err
			}
		}
		res := result{Bytes: size, Seconds: plain, SharedSeconds: sharedSec}
		pairs, _ := strconv.Atoi(os.Getenv(inJobEnv))
		if pairs > 0 && (rawAllreduce == nil || g.Transport() != dist.TransportMPI) {
			return fmt.Errorf("$%s needs the mpi backend in a build with -tags mpi", inJobEnv)
		}
		for range pairs {
			viaDDP, err := timeAllReduce(ctx, g, dist.Float32s(buf))
			if err != nil {
				return err
			}
			res.InJob = append(res.InJob, [2]float64{viaDDP, rawAllreduce(buf)})
		}
		if g.Rank() == 0 {
			out, _ := json.Marshal(res)
			fmt.Println(string(out))
		}
	}
	return nil
}

// timeAllReduce all-reduces buf (after 2 warm-ups) until about 0.5 s has
// passed, at least 3 times, and returns the mean seconds per all-reduce.
func timeAllReduce(ctx context.Context, g *dist.ProcessGroup, buf dist.Buffer) (float64, error) {
	for range 2 {
		if err := g.AllReduce(ctx, buf, dist.Sum); err != nil {
			return 0, err
		}
	}
	iters := 0
	var elapsed time.Duration
	for {
		// Rank 0 decides when to stop; everyone must run the same count.
		stop := []int32{0}
		if g.Rank() == 0 && iters >= 3 && elapsed >= 500*time.Millisecond {
			stop[0] = 1
		}
		if err := g.Broadcast(ctx, dist.Int32s(stop), 0); err != nil {
			return 0, err
		}
		if stop[0] == 1 {
			break
		}
		// Back to back, as OSU's osu_allreduce times them: a small
		// all-reduce's latency, not the skew the stop broadcast leaves.
		reps := max(1, min(100, (1<<20)/(buf.Len()*buf.DType.Size())))
		start := time.Now()
		for range reps {
			if err := g.AllReduce(ctx, buf, dist.Sum); err != nil {
				return 0, err
			}
		}
		elapsed += time.Since(start)
		iters += reps
	}
	return elapsed.Seconds() / float64(iters), nil
}
