package zero_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/ddp/checkpoint"
	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/ddp/internal/ddptest"
	"github.com/xladdp/xladdp/ddp/zero"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/optim"
	"github.com/xladdp/xladdp/xla/xlatest"
)

func init() {
	ddptest.Scenarios["zero-resume"] = zeroResumeScenario
	ddptest.Scenarios["zero-save-loop"] = zeroSaveLoopScenario
}

const (
	zeroResumeAt    = 10 // steps before the save
	zeroResumeSteps = 50 // steps compared after it
)

// zeroResumeScenario trains $XLADDP_TEST_MODEL with a sharded
// $XLADDP_TEST_OPTIM on $XLADDP_TEST_DEVICES local replicas per rank:
// phase "save" trains zeroResumeAt steps, saves to $XLADDP_TEST_DIR and
// trains zeroResumeSteps more; phase "resume" loads it and trains
// zeroResumeSteps. Each local replica's losses after the save are reported
// (in Params, one list per local replica).
func zeroResumeScenario(rep *ddptest.Report) {
	ctx := context.Background()
	kind, dir, phase := os.Getenv("XLADDP_TEST_MODEL"), os.Getenv("XLADDP_TEST_DIR"), os.Getenv("XLADDP_TEST_PHASE")
	devices, _ := strconv.Atoi(os.Getenv("XLADDP_TEST_DEVICES"))
	e, done, err := ddptest.JoinJob(ctx, devices)
	if err != nil {
		rep.Error = err.Error()
		return
	}
	defer done()
	losses := make([][]float32, devices)
	err = e.RunReplicas(ctx, devices, func(ctx context.Context, r xla.Replica) error {
		replica, replicas := dist.Rank()*devices+r.Index(), dist.WorldSize()*devices
		rows := ddptest.GlobalRows / replicas
		d := r.Device()
		model, z, err := newShardedModel(ctx, d, kind, os.Getenv("XLADDP_TEST_OPTIM"), uint64(100+replica))
		if err != nil {
			return err
		}
		ck := optim.Checkpoint{Model: model, Optimizer: z}
		step := func(record bool) error {
			z.ZeroGrad()
			loss, err := ddptest.LossOn(d, model, kind, replica*rows, (replica+1)*rows)
			if err != nil {
				return err
			}
			if err := optim.BackwardStep(ctx, loss, z); err != nil {
				return err
			}
			if record {
				v, err := loss.Item(ctx)
				losses[r.Index()] = append(losses[r.Index()], float32(v))
				return err
			}
			return nil
		}
		if phase == "save" {
			for range zeroResumeAt {
				if err := step(false); err != nil {
					return err
				}
			}
			ck.Step = zeroResumeAt
			if err := checkpoint.Save(ctx, dir, ck); err != nil {
				return err
			}
		} else {
			if err := checkpoint.Load(ctx, dir, &ck); err != nil {
				return err
			}
			if ck.Step != zeroResumeAt {
				return fmt.Errorf("resumed at step %d, saved at %d", ck.Step, zeroResumeAt)
			}
		}
		for range zeroResumeSteps {
			if err := step(true); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		rep.Error = err.Error()
		return
	}
	rep.Params = losses
}

// newShardedModel builds kind wrapped, with its optimizer (or name's)
// sharded.
func newShardedModel(ctx context.Context, d *xla.Device, kind, name string, seed uint64) (*ddp.DistributedDataParallel, *zero.ZeroRedundancyOptimizer, error) {
	step := 0
	inner, err := ddptest.NewModel(d, kind, seed, &step)
	if err != nil {
		return nil, nil, err
	}
	model, err := ddp.Wrap(ctx, inner)
	if err != nil {
		return nil, nil, err
	}
	recipe := ddptest.OptimizerFor(kind, name, model)
	z, err := zero.New(ctx, model, recipe.Groups, recipe.Build)
	return model, z, err
}

// TestZeroResumesAtAnotherWorldSize: saved by 4 replicas, the checkpoint
// resumes on 2 and on 3, in-graph and across processes, and the mean
// loss of each of the next 50 steps equals the uninterrupted run's to
// 1e-6 relative (the global batch is the same at every world size).
func TestZeroResumesAtAnotherWorldSize(t *testing.T) {
	for _, c := range []struct {
		optimizer          string
		processes, devices int
		resume             [][2]int // processes, devices
	}{
		{"adam", 1, 4, [][2]int{{1, 2}, {1, 3}, {2, 1}}},
		{"nesterov", 4, 1, [][2]int{{2, 1}, {3, 1}}},
	} {
		t.Run(fmt.Sprintf("%s/%dx%d", c.optimizer, c.processes, c.devices), func(t *testing.T) {
			dir := t.TempDir()
			run := func(phase string, processes, devices int) []float64 {
				cmds, outs := ddptest.Launch(t, "zero-resume", processes, "XLADDP_TEST_TIMEOUT=60s", "XLADDP_TEST_MODEL=toy",
					"XLADDP_TEST_OPTIM="+c.optimizer, "XLADDP_TEST_DIR="+dir, "XLADDP_TEST_PHASE="+phase,
					"XLADDP_TEST_DEVICES="+strconv.Itoa(devices))
				mean := make([]float64, zeroResumeSteps)
				count := 0
				for r, rep := range ddptest.WaitReports(t, cmds, outs) {
					require.Empty(t, rep.Error, "rank %d (%s)", r, phase)
					for _, losses := range rep.Params {
						require.Len(t, losses, zeroResumeSteps)
						for s, l := range losses {
							mean[s] += float64(l)
						}
						count++
					}
				}
				for s := range mean {
					mean[s] /= float64(count)
				}
				return mean
			}
			want := run("save", c.processes, c.devices)
			for _, layout := range c.resume {
				got := run("resume", layout[0], layout[1])
				for s := range want {
					assert.LessOrEqual(t, math.Abs(got[s]-want[s]), zeroTolerance*math.Abs(want[s]),
						"resumed on %dx%d: step %d: %v, uninterrupted %v", layout[0], layout[1], zeroResumeAt+s+1, got[s], want[s])
				}
			}
		})
	}
}

// zeroSaveLoopScenario trains the wide model sharded over 2 local
// replicas and saves a sharded checkpoint to $XLADDP_TEST_DIR after every
// step, printing "saved N" to stdout, until killed.
func zeroSaveLoopScenario(rep *ddptest.Report) {
	ctx := context.Background()
	e, done, err := ddptest.JoinJob(ctx, 2)
	if err != nil {
		rep.Error = err.Error()
		return
	}
	defer done()
	err = e.RunReplicas(ctx, 2, func(ctx context.Context, r xla.Replica) error {
		model, z, err := newShardedModel(ctx, r.Device(), "wide", "adam", 100)
		if err != nil {
			return err
		}
		for s := 1; ; s++ {
			z.ZeroGrad()
			loss, err := ddptest.LossOn(r.Device(), model, "wide", r.Index()*24, (r.Index()+1)*24)
			if err != nil {
				return err
			}
			if err := optim.BackwardStep(ctx, loss, z); err != nil {
				return err
			}
			if err := checkpoint.Save(ctx, os.Getenv("XLADDP_TEST_DIR"), optim.Checkpoint{Model: model, Optimizer: z, Step: s}); err != nil {
				return err
			}
			if r.Index() == 0 {
				fmt.Printf("saved %d\n", s)
			}
		}
	})
	rep.Error = fmt.Sprint(err)
}

// TestZeroSaveSurvivesSIGKILL: a job saving a sharded checkpoint after
// every step is killed (SIGKILL) at random moments; each time the
// directory holds a complete checkpoint of a step the job reported saved
// or the one after it, which loads on one replica (resharded from 2).
func TestZeroSaveSurvivesSIGKILL(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	e := xlatest.NewEngine(t, 1)
	ctx := xlatest.Context(t)
	for trial := range 4 {
		cmds, outs := ddptest.Launch(t, "zero-save-loop", 1, "XLADDP_TEST_DIR="+dir)
		deadline := time.Now().Add(time.Minute)
		for !strings.Contains(outs[0].String(), "saved") {
			require.True(t, time.Now().Before(deadline), "trial %d: no save in a minute: %s", trial, outs[0].String())
			time.Sleep(5 * time.Millisecond)
		}
		// A random moment: most of the loop's time is spent saving.
		time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
		require.NoError(t, cmds[0].Process.Kill())
		_ = cmds[0].Wait()
		last := 0
		for _, line := range strings.Split(outs[0].String(), "\n") {
			if v, ok := strings.CutPrefix(line, "saved "); ok {
				last, _ = strconv.Atoi(v)
			}
		}
		saved, err := zero.CommittedStep(dir)
		require.NoError(t, err, "trial %d: after a SIGKILL (last reported save: step %d)", trial, last)
		assert.Contains(t, []int{last, last + 1}, saved, "trial %d", trial)
		versions, _ := filepath.Glob(filepath.Join(dir, "step-*"))
		t.Logf("trial %d: killed after step %d's save; checkpoint at step %d; %d version directories", trial, last, saved, len(versions))
		model, z, err := newShardedModel(ctx, e.Device(0), "wide", "adam", 7)
		require.NoError(t, err)
		loaded := optim.Checkpoint{Model: model, Optimizer: z}
		require.NoError(t, checkpoint.Load(ctx, dir, &loaded), "trial %d", trial)
		assert.Equal(t, saved, loaded.Step)
		require.NoError(t, zero.ConsolidateCheckpoint(dir, filepath.Join(t.TempDir(), "whole.safetensors")))
	}
}
