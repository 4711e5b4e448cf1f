package dist

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/gomlx/compute/dtypes/bfloat16"
	"github.com/xladdp/xladdp/ddp/internal/transport"
	"github.com/xladdp/xladdp/ddp/internal/workertest"
)

// The shared harness (package workertest), under this package's names.
type (
	report = workertest.Report
	output = workertest.Output
)

const (
	workerEnv    = workertest.Env
	reportDirEnv = workertest.ReportDirEnv
)

var (
	launch      = workertest.Launch
	waitReports = workertest.WaitReports
	workerRank  = workertest.Rank
	freePort    = workertest.FreePort
)

func TestMain(m *testing.M) { workertest.Main(m, runWorker) }

var scenarios = map[string]func(ctx context.Context, g *ProcessGroup, rep *report){
	"collectives": collectivesScenario,
	"kill":        killScenario,
	"mismatch":    mismatchScenario,
	"basic":       basicScenario,
	"stall":       stallScenario,
}

func runWorker(scenario string) int {
	rep := &report{Rank: workerRank(), Hashes: map[string]string{}}
	defer workertest.Finish(rep)
	if run, ok := groupScenarios[scenario]; ok {
		run(rep) // scenarios that make (or do not make) their own groups
		return 0
	}
	o := NewOptions()
	if s := os.Getenv("XLADDP_TEST_TIMEOUT"); s != "" {
		o.Timeout, _ = time.ParseDuration(s)
	}
	if m := os.Getenv("XLADDP_TEST_INIT_METHOD"); m != "" {
		o.InitMethod = m
	}
	ctx := context.Background()
	g, err := InitProcessGroup(ctx, o)
	if err != nil {
		rep.Error = err.Error()
		return 0
	}
	defer g.Destroy()
	run := scenarios[scenario]
	if run == nil {
		rep.Error = "unknown scenario " + scenario
		return 1
	}
	run(ctx, g, rep)
	rep.Transport = "tcp"
	if g.HasSharedMemory() {
		rep.Transport = "shared memory"
	}
	if g.Transport() == TransportMPI {
		rep.Transport = TransportMPI
	}
	rep.SharedMemoryAllReduces = g.SharedMemoryAllReduces()
	return 0
}

// values are a case's inputs for one rank, as float64, and a Buffer of
// dtype holding them (bfloat16 values are rounded first, so the reference
// sees exactly what the rank sent).
func values(d DType, op ReduceOp, n, rank int, seed uint64) ([]float64, Buffer) {
	rng := rand.New(rand.NewPCG(seed, uint64(rank)))
	v := make([]float64, n)
	for i := range v {
		switch {
		case op == Product && (d == Int32 || d == Int64):
			v[i] = float64(rng.IntN(5) - 2)
		case op == Product:
			v[i] = 0.5 + rng.Float64()
		case d == Int32 || d == Int64:
			v[i] = float64(rng.IntN(2001) - 1000)
		default:
			v[i] = rng.NormFloat64() * 10
		}
	}
	switch d {
	case Float32:
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(v[i])
			v[i] = float64(x[i])
		}
		return v, Float32s(x)
	case Float64:
		return v, Float64s(append([]float64(nil), v...))
	case BFloat16:
		x := make([]bfloat16.BFloat16, n)
		for i := range x {
			x[i] = bfloat16.FromFloat64(v[i])
			v[i] = float64(x[i].Float32())
		}
		return v, BFloat16s(x)
	case Int32:
		x := make([]int32, n)
		for i := range x {
			x[i] = int32(v[i])
		}
		return v, Int32s(x)
	default:
		x := make([]int64, n)
		for i := range x {
			x[i] = int64(v[i])
		}
		return v, Int64s(x)
	}
}

func asFloat64s(b Buffer) []float64 {
	out := make([]float64, b.Len())
	for i := range out {
		switch b.DType {
		case Float32:
			out[i] = float64(transport.AsSlice[float32](b)[i])
		case Float64:
			out[i] = transport.AsSlice[float64](b)[i]
		case BFloat16:
			out[i] = float64(transport.AsSlice[bfloat16.BFloat16](b)[i].Float32())
		case Int32:
			out[i] = float64(transport.AsSlice[int32](b)[i])
		case Int64:
			out[i] = float64(transport.AsSlice[int64](b)[i])
		}
	}
	return out
}

// referenceReduce combines every rank's values in float64 (integers exactly).
func referenceReduce(d DType, op ReduceOp, world, n int, seed uint64) (ref, magnitude []float64) {
	ref = make([]float64, n)
	magnitude = make([]float64, n)
	for q := range world {
		v, _ := values(d, op, n, q, seed)
		for i := range ref {
			magnitude[i] += math.Abs(v[i])
			switch {
			case q == 0:
				ref[i] = v[i]
			case op == Min:
				ref[i] = math.Min(ref[i], v[i])
			case op == Max:
				ref[i] = math.Max(ref[i], v[i])
			case op == Product:
				ref[i] *= v[i]
			default:
				ref[i] += v[i]
			}
		}
	}
	if op == Avg {
		for i := range ref {
			if d == Int32 || d == Int64 {
				ref[i] = float64(int64(ref[i]) / int64(world))
			} else {
				ref[i] /= float64(world)
			}
		}
	}
	return ref, magnitude
}

// tolerance for element i: exact for integers, min and max; rounding
// bounds for floats (bfloat16 rounds at every ring step).
func tolerance(d DType, op ReduceOp, ref, magnitude float64) float64 {
	if d == Int32 || d == Int64 || op == Min || op == Max {
		return 0
	}
	scale := magnitude
	if op == Product {
		scale = math.Abs(ref)
	}
	switch d {
	case Float32:
		return 1e-5 * scale
	case Float64:
		return 1e-12 * scale
	}
	return 0.03 * scale
}

func hashOf(b Buffer) string {
	s := sha256.Sum256(b.Bytes())
	return hex.EncodeToString(s[:8])
}

func check(rep *report, name string, got Buffer, want, magnitude []float64, d DType, op ReduceOp) {
	g := asFloat64s(got)
	for i := range want {
		if math.Abs(g[i]-want[i]) > tolerance(d, op, want[i], magnitude[i]) {
			rep.Failures = append(rep.Failures, fmt.Sprintf("%s[%d] = %v, want %v", name, i, g[i], want[i]))
			return
		}
	}
}

// collectivesScenario checks every collective on every dtype against
// references each rank computes from every rank's (seeded) inputs.
func collectivesScenario(ctx context.Context, g *ProcessGroup, rep *report) {
	world, rank := g.WorldSize(), g.Rank()
	dtypes := []DType{Float32, Float64, BFloat16, Int32, Int64}
	ops := []ReduceOp{Sum, Avg, Min, Max, Product}
	seed := uint64(0)
	for _, d := range dtypes {
		for _, op := range ops {
			lengths := []int{1, 7, 1001, 70001}
			if d == Float32 && (op == Sum || op == Max) {
				lengths = append(lengths, 700_001) // ring steps of several 1 MiB pieces
			}
			for _, n := range lengths {
				seed++
				name := fmt.Sprintf("AllReduce(%s, %s[%d])", op, d, n)
				_, buf := values(d, op, n, rank, seed)
				if err := g.AllReduce(ctx, buf, op); err != nil {
					rep.Error = name + ": " + err.Error()
					return
				}
				want, mag := referenceReduce(d, op, world, n, seed)
				check(rep, name, buf, want, mag, d, op)
				rep.Hashes[name] = hashOf(buf)
			}
		}
	}
	// In-place all-reduce of shared buffers (plain buffers without shared memory).
	for _, op := range []ReduceOp{Sum, Max} {
		seed++
		n := 300_001
		v, _ := values(Float32, op, n, rank, seed)
		shared, err := g.SharedBuffer(Float32, n)
		if err != nil {
			rep.Error = err.Error()
			return
		}
		for i, x := range v {
			transport.AsSlice[float32](shared)[i] = float32(x)
		}
		if err := g.AllReduce(ctx, shared, op); err != nil {
			rep.Error = err.Error()
			return
		}
		want, mag := referenceReduce(Float32, op, world, n, seed)
		name := fmt.Sprintf("SharedBuffer AllReduce(%s, float32[%d])", op, n)
		check(rep, name, shared, want, mag, Float32, op)
		rep.Hashes[name] = hashOf(shared)
	}
	// Broadcast from every root, odd length.
	for root := range world {
		seed++
		v, buf := values(Float64, Sum, 1003, root, seed)
		if rank != root {
			_, buf = values(Float64, Sum, 1003, rank, seed+1000)
		}
		if err := g.Broadcast(ctx, buf, root); err != nil {
			rep.Error = err.Error()
			return
		}
		check(rep, fmt.Sprintf("Broadcast(root %d)", root), buf, v, make([]float64, len(v)), Int64, Sum)
	}
	// AllGather and Gather/Scatter on int64 (exact) and bfloat16; the
	// bfloat16 ones through their Async variants.
	for _, d := range []DType{Int64, BFloat16} {
		async := d == BFloat16
		seed++
		n := 13
		_, in := values(d, Sum, n, rank, seed)
		var want []float64
		for q := range world {
			v, _ := values(d, Sum, n, q, seed)
			want = append(want, v...)
		}
		_, out := values(d, Sum, n*world, rank, seed+5000)
		allGather, gather, scatter := g.AllGather, g.Gather, g.Scatter
		if async {
			allGather = func(ctx context.Context, out, in Buffer) error { return g.AllGatherAsync(out, in).Wait(ctx) }
			gather = func(ctx context.Context, out, in Buffer, root int) error {
				return g.GatherAsync(out, in, root).Wait(ctx)
			}
			scatter = func(ctx context.Context, out, in Buffer, root int) error {
				return g.ScatterAsync(out, in, root).Wait(ctx)
			}
		}
		if err := allGather(ctx, out, in); err != nil {
			rep.Error = err.Error()
			return
		}
		check(rep, "AllGather("+d.String()+")", out, want, make([]float64, len(want)), Int64, Sum)
		_, gathered := values(d, Sum, n*world, rank, seed+6000)
		if err := gather(ctx, gathered, in, world-1); err != nil {
			rep.Error = err.Error()
			return
		}
		if rank == world-1 {
			check(rep, "Gather("+d.String()+")", gathered, want, make([]float64, len(want)), Int64, Sum)
		}
		_, part := values(d, Sum, n, rank, seed+7000)
		if err := scatter(ctx, part, out, 0); err != nil {
			rep.Error = err.Error()
			return
		}
		check(rep, "Scatter("+d.String()+")", part, want[rank*n:(rank+1)*n], make([]float64, n), Int64, Sum)
	}
	// ReduceScatter for every op on float32, odd block length (Avg and
	// Product through ReduceScatterAsync).
	for _, op := range ops {
		seed++
		n := 9
		_, in := values(Float32, op, n*world, rank, seed)
		orig := append([]byte(nil), in.Bytes()...)
		_, out := values(Float32, op, n, rank, seed+100)
		reduceScatter := g.ReduceScatter
		if op == Avg || op == Product {
			reduceScatter = func(ctx context.Context, out, in Buffer, op ReduceOp) error {
				return g.ReduceScatterAsync(out, in, op).Wait(ctx)
			}
		}
		if err := reduceScatter(ctx, out, in, op); err != nil {
			rep.Error = err.Error()
			return
		}
		want, mag := referenceReduce(Float32, op, world, n*world, seed)
		check(rep, "ReduceScatter("+op.String()+")", out, want[rank*n:(rank+1)*n], mag[rank*n:(rank+1)*n], Float32, op)
		if !bytes.Equal(orig, in.Bytes()) {
			rep.Failures = append(rep.Failures, "ReduceScatter changed its input")
		}
	}
	// AllToAllSingle with uneven splits: rank q sends q+p+1 elements to p.
	{
		var inSplits, outSplits []int
		var in, want []int64
		for p := range world {
			inSplits = append(inSplits, rank+p+1)
			outSplits = append(outSplits, p+rank+1)
			for k := range rank + p + 1 {
				in = append(in, int64(1000*rank+100*p+k))
			}
			for k := range p + rank + 1 {
				want = append(want, int64(1000*p+100*rank+k))
			}
		}
		out, outAsync := make([]int64, len(want)), make([]int64, len(want))
		if err := g.AllToAllSingle(ctx, Int64s(out), Int64s(in), outSplits, inSplits); err != nil {
			rep.Error = err.Error()
			return
		}
		if err := g.AllToAllSingleAsync(Int64s(outAsync), Int64s(in), outSplits, inSplits).Wait(ctx); err != nil {
			rep.Error = err.Error()
			return
		}
		if !slices.Equal(out, outAsync) {
			rep.Failures = append(rep.Failures, fmt.Sprintf("AllToAllSingleAsync got %v, AllToAllSingle %v", outAsync, out))
		}
		wantF := make([]float64, len(want))
		for i, w := range want {
			wantF[i] = float64(w)
		}
		check(rep, "AllToAllSingle", Int64s(out), wantF, make([]float64, len(want)), Int64, Sum)
	}
	// Send/Recv around the ring, with the tags sent out of order.
	if world > 1 {
		right, left := (rank+1)%world, (rank-1+world)%world
		a, b := []int32{int32(rank), 1}, []int32{int32(rank), 2}
		w1 := g.SendAsync(Int32s(b), right, 2)
		w2 := g.SendAsync(Int32s(a), right, 1)
		got1, got2 := make([]int32, 2), make([]int32, 2)
		if err := g.Recv(ctx, Int32s(got1), left, 1); err != nil {
			rep.Error = err.Error()
			return
		}
		if err := g.Recv(ctx, Int32s(got2), left, 2); err != nil {
			rep.Error = err.Error()
			return
		}
		if err := firstError(w1.Wait(ctx), w2.Wait(ctx)); err != nil {
			rep.Error = err.Error()
			return
		}
		if got1[0] != int32(left) || got1[1] != 1 || got2[0] != int32(left) || got2[1] != 2 {
			rep.Failures = append(rep.Failures, fmt.Sprintf("Send/Recv got %v %v from rank %d", got1, got2, left))
		}
	}
	// Several async all-reduces in flight, then a barrier.
	works := make([]*Work, 4)
	bufs := make([][]int64, 4)
	for i := range works {
		bufs[i] = []int64{int64(rank + i)}
		works[i] = g.AllReduceAsync(Int64s(bufs[i]), Sum)
	}
	for i, w := range works {
		if err := w.Wait(ctx); err != nil {
			rep.Error = err.Error()
			return
		}
		want := int64(world*(world-1)/2 + world*i)
		if bufs[i][0] != want {
			rep.Failures = append(rep.Failures, fmt.Sprintf("async AllReduce %d = %d, want %d", i, bufs[i][0], want))
		}
	}
	if err := g.Barrier(ctx); err != nil {
		rep.Error = err.Error()
	}
}

// basicScenario is one all-reduce, for rendezvous tests.
func basicScenario(ctx context.Context, g *ProcessGroup, rep *report) {
	x := []int64{int64(g.Rank() + 1)}
	if err := g.AllReduce(ctx, Int64s(x), Sum); err != nil {
		rep.Error = err.Error()
		return
	}
	rep.Hashes["sum"] = strconv.FormatInt(x[0], 10)
	rep.Hashes["local"] = fmt.Sprintf("%d/%d", g.LocalRank(), g.LocalWorldSize())
}

// killScenario: every rank all-reduces 8 MiB in a loop; the test kills one
// rank; the others report the error and how long after the kill it came.
func killScenario(ctx context.Context, g *ProcessGroup, rep *report) {
	buf := make([]float32, 2<<20)
	fmt.Println("looping")
	if dir := os.Getenv(reportDirEnv); dir != "" {
		_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("pid-%d", g.Rank())), []byte(strconv.Itoa(os.Getpid())), 0o644)
	}
	for {
		start := time.Now()
		if err := g.AllReduce(ctx, Float32s(buf), Sum); err != nil {
			rep.Error = err.Error()
			rep.Elapsed = time.Since(start).Seconds()
			return
		}
	}
}

// mismatchScenario: in debug mode rank 0 all-reduces while the others
// broadcast.
func mismatchScenario(ctx context.Context, g *ProcessGroup, rep *report) {
	x := make([]float32, 10)
	var err error
	if g.Rank() == 0 {
		err = g.AllReduce(ctx, Float32s(x), Sum)
	} else {
		err = g.Broadcast(ctx, Float32s(x), 0)
	}
	if err != nil {
		rep.Error = err.Error()
	}
}

// stallScenario: rank 1 stays alive but never joins the all-reduce.
// stallFor is how long the stall scenario's rank 1 stays away: well
// past the tests' 3 s timeout, so a loaded machine's slow start never
// makes it look joined.
const stallFor = 10 * time.Second

func stallScenario(ctx context.Context, g *ProcessGroup, rep *report) {
	if g.Rank() == 1 {
		time.Sleep(stallFor)
		return
	}
	start := time.Now()
	x := make([]float32, 1000)
	if err := g.AllReduce(ctx, Float32s(x), Sum); err != nil {
		rep.Error = err.Error()
	}
	rep.Elapsed = time.Since(start).Seconds()
}
