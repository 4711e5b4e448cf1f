package launch_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/ddp/checkpoint"
	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
)

// preemptSteps is how long the preemptible training runs.
const preemptSteps = 60

// rankStep reads $name=RANK:STEP on the job's first attempt; -1, -1
// otherwise.
func rankStep(name string) (rank, step int) {
	at := os.Getenv(name)
	if at == "" || os.Getenv("TORCHELASTIC_RESTART_COUNT") != "0" {
		return -1, -1
	}
	r, s, _ := strings.Cut(at, ":")
	rank, _ = strconv.Atoi(r)
	step, _ = strconv.Atoi(s)
	return rank, step
}

// preemptible trains an MLP with dropout (each rank's device seeded
// apart) for preemptSteps steps under a
// checkpoint.Checkpointer in $XLADDP_TEST_DIR (every 5 steps, and on SIGTERM),
// resuming from its latest checkpoint. It marks in $XLADDP_TEST_DIR
// that it reached step 10, and, with $XLADDP_TEST_KILL_AT=RANK:STEP on
// its first attempt, that rank kills itself (SIGKILL) at that step; with
// $XLADDP_TEST_TERM_AT=RANK:STEP that rank sends itself SIGTERM there,
// and the others get theirs after their commit. Rank 0 prints the final
// parameters.
func preemptible() int {
	ctx := context.Background()
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "preemptible:", err); return 2 }
	if err := dist.Init(ctx, dist.NewOptions()); err != nil {
		return fail(err)
	}
	defer dist.Destroy()
	rank := dist.Rank()
	d, closeEngine, err := cpuDevice(ctx)
	if err != nil {
		return fail(err)
	}
	defer closeEngine()
	// Seeded by rank, as torch scripts often do: a resume must give each
	// rank its own random state back, not rank 0's.
	if err := d.ManualSeed(100 + int64(rank)); err != nil {
		return fail(err)
	}
	l1, err1 := nn.NewLinear(d, nn.NewRand(7), 10, 32, true)
	l2, err2 := nn.NewLinear(d, nn.NewRand(8), 32, 5, true)
	drop, err3 := nn.NewDropout(0.3)
	if err := errors.Join(err1, err2, err3); err != nil {
		return fail(err)
	}
	model, err := ddp.Wrap(ctx, nn.NewSequential(l1, nn.ReLU{}, drop, l2))
	if err != nil {
		return fail(err)
	}
	opt, err := optim.NewSGD(nn.Parameters(model), optim.SGDConfig{LR: 0.05, Momentum: 0.9})
	if err != nil {
		return fail(err)
	}
	dir := os.Getenv("XLADDP_TEST_DIR")
	ck, err := checkpoint.New(checkpoint.Options{Dir: filepath.Join(dir, "ck"), Every: 5})
	if err != nil {
		return fail(err)
	}
	defer ck.Close()
	state := optim.Checkpoint{Model: model, Optimizer: opt, RNG: d}
	if ok, err := ck.Restore(ctx, &state); err != nil {
		return fail(err)
	} else if ok {
		fmt.Printf("resumed at %d\n", state.Step)
	}
	killRank, killStep := rankStep("XLADDP_TEST_KILL_AT")
	termRank, termStep := rankStep("XLADDP_TEST_TERM_AT")
	xs, ys := make([]float32, 4*10), make([]float32, 4*5)
	for step := state.Step; step < preemptSteps; step++ {
		for i := range xs {
			xs[i] = float32((i*7+rank*3+step)%11) / 11
		}
		for i := range ys {
			ys[i] = float32((i*5+rank+step)%7) / 7
		}
		x, _ := xla.FromSlice(d, xs, 4, 10)
		y, _ := xla.FromSlice(d, ys, 4, 5)
		if rank == killRank && step == killStep {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		opt.ZeroGrad()
		if err := optim.BackwardStep(ctx, nn.MSELoss(model.Forward(x), y, nn.ReductionMean), opt); err != nil {
			return fail(err)
		}
		if step == 10 {
			_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("at-10-%d", rank)), []byte(strconv.Itoa(os.Getpid())), 0o644)
		}
		time.Sleep(10 * time.Millisecond) // time for the test to signal mid-run
		state.Step = step + 1
		if rank == termRank && step == termStep {
			_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
		}
		if err := ck.Step(ctx, state); errors.Is(err, checkpoint.ErrPreempted) {
			fmt.Printf("preempted after step %d\n", state.Step)
			if rank != termRank && termRank >= 0 {
				// The notice reaches this rank late, after its commit.
				_ = ck.Close()
				_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
				time.Sleep(300 * time.Millisecond)
			}
			return checkpoint.ExitPreempted
		} else if err != nil {
			return fail(err)
		}
	}
	if rank == 0 {
		if err := printParams(ctx, model); err != nil {
			return fail(err)
		}
	}
	return 0
}
