package checkpoint_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/ddp/checkpoint"
	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/ddp/internal/ddptest"
	"github.com/xladdp/xladdp/ddp/internal/regroup"
	"github.com/xladdp/xladdp/internal/workerenv"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/optim"
	"github.com/xladdp/xladdp/xla/safetensors"
	"github.com/xladdp/xladdp/xla/xlatest"
)

// asAJoinableWorker makes this test process a ddprun worker whose pass
// regroups in place, with regroupDir as its regroup directory.
func asAJoinableWorker(t *testing.T) (regroupDir string) {
	regroupDir = t.TempDir()
	t.Setenv(workerenv.RegroupDir, regroupDir)
	t.Setenv(workerenv.LocalRank, "0")
	t.Setenv(workerenv.RestartCount, "0")
	regroup.SetActive(true)
	t.Cleanup(func() { regroup.SetActive(false) })
	return regroupDir
}

// savedTensors is c saved to a file of dir, read back: what a resume
// would hold.
func savedTensors(t *testing.T, ctx context.Context, dir, name string, c optim.Checkpoint) safetensors.File {
	t.Helper()
	path := filepath.Join(dir, name)
	require.NoError(t, checkpoint.Save(ctx, path, c))
	f, err := safetensors.ReadFile(path)
	require.NoError(t, err)
	return f
}

// TestAStepHeldForAJoiningNodeHeals: a checkpointer of a worker that
// regroups in place offers to hold a step; asked by its agent, Step
// holds the step in memory (rank 0 writes it too, for a restart),
// returns an error ddp.Run regroups
// on and a preemption's exit status, and notes it for the agent; the next
// Restore heals a fresh model from it, bit for bit, saying from where;
// held again and not healed, CommitHeld writes it where the directory's
// Restore finds it. Without the request, at the job's last step, or
// outside a regrouping pass, nothing is held.
func TestAStepHeldForAJoiningNodeHeals(t *testing.T) {
	ctx := xlatest.Context(t)
	d := xlatest.NewEngine(t, 1).Device(0)
	regroupDir := asAJoinableWorker(t)
	flight := t.TempDir()
	t.Setenv(workerenv.FlightDir, flight)
	dir, scratch := t.TempDir(), t.TempDir()

	c := trained(t, ctx, d, 5)
	want := savedTensors(t, ctx, scratch, "want.safetensors", c)
	ck, err := checkpoint.New(checkpoint.Options{Dir: dir})
	require.NoError(t, err)
	assert.True(t, workerenv.Joinable(regroupDir, 0), "the checkpointer offered to hold a step")
	require.NoError(t, ck.Step(ctx, c), "no request: the step goes on")
	require.NoError(t, workerenv.RequestJoin(regroupDir, 0))
	err = ck.Step(ctx, c)
	require.Error(t, err)
	assert.ErrorIs(t, err, checkpoint.ErrPreempted, "a worker that exits with it exits 75")
	assert.True(t, regroup.CommittedOnPeerLoss(err), "ddp.Run regroups on it")
	assert.Contains(t, err.Error(), "step 5 is held in every process's memory for the node(s) joining the job")
	assert.Contains(t, workerenv.ReadPeerLossNote(flight, dist.Current().Rank()), workerenv.Held+"step 5 in this process's memory")
	require.NoError(t, ck.Close())
	assert.False(t, workerenv.Joinable(regroupDir, 0), "the offer is taken back as the checkpointer closes")
	assert.FileExists(t, filepath.Join(dir, "step-000000000005.safetensors"), "rank 0 writes the held step too, for a restart meanwhile")
	require.NoError(t, os.Remove(filepath.Join(dir, "step-000000000005.safetensors")), "the heal below reads memory, not this file")

	fresh := trained(t, ctx, d, 0)
	ck2, err := checkpoint.New(checkpoint.Options{Dir: dir})
	require.NoError(t, err)
	restored, err := ck2.Restore(ctx, &fresh)
	require.NoError(t, err)
	require.True(t, restored)
	assert.Regexp(t, `^rank 0's memory, a live peer \(\d+\.\d KiB in \d+m?s\)$`, ck2.HealedFrom())
	assert.Equal(t, 5, fresh.Step)
	got := savedTensors(t, ctx, scratch, "got.safetensors", fresh)
	assert.Equal(t, want.Tensors, got.Tensors, "healed bit for bit")
	require.NoError(t, ck2.Close())
	path, err := checkpoint.CommitHeld()
	require.NoError(t, err)
	assert.Empty(t, path, "a healed step is let go")

	ck3, err := checkpoint.New(checkpoint.Options{Dir: dir})
	require.NoError(t, err)
	require.NoError(t, workerenv.RequestJoin(regroupDir, 0))
	c.Step = 6
	require.ErrorIs(t, ck3.Step(ctx, c), checkpoint.ErrPreempted)
	require.NoError(t, ck3.Close())
	path, err = checkpoint.CommitHeld()
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(dir, "step-000000000006.safetensors"), path)
	again := trained(t, ctx, d, 0)
	ck4, err := checkpoint.New(checkpoint.Options{Dir: dir})
	require.NoError(t, err)
	restored, err = ck4.Restore(ctx, &again)
	require.NoError(t, err)
	assert.True(t, restored)
	assert.Equal(t, 6, again.Step)
	assert.Empty(t, ck4.HealedFrom(), "read from the file CommitHeld wrote")
	assert.Equal(t, want.Tensors, savedTensors(t, ctx, scratch, "again.safetensors", again).Tensors)
	require.NoError(t, ck4.Close())

	ck6, err := checkpoint.New(checkpoint.Options{Dir: t.TempDir()})
	require.NoError(t, err)
	require.NoError(t, workerenv.RequestJoin(regroupDir, 0))
	assert.NoError(t, ck6.Last(ctx, c), "the job's last step is not held: the job ends")
	require.NoError(t, ck6.Close())
	path, err = checkpoint.CommitHeld()
	require.NoError(t, err)
	assert.Empty(t, path)

	regroup.SetActive(false)
	ck5, err := checkpoint.New(checkpoint.Options{Dir: t.TempDir()})
	require.NoError(t, err)
	defer ck5.Close()
	assert.False(t, workerenv.Joinable(regroupDir, 0), "no offer outside a regrouping pass")
	require.NoError(t, workerenv.RequestJoin(regroupDir, 0))
	assert.NoError(t, ck5.Step(ctx, c), "a request no checkpointer offered for holds nothing")
}

func init() { ddptest.Scenarios["heal-hostile"] = healHostileScenario }

// healHostileScenario: rank 0 plays a peer that says it holds a step,
// then sends $XLADDP_TEST_SIZE as its size and that many bytes of
// garbage (when they fit); rank 1 restores through its checkpointer and
// reports the error and how long it took.
func healHostileScenario(rep *ddptest.Report) {
	ctx := context.Background()
	e, done, err := ddptest.JoinJob(ctx, 1)
	if err != nil {
		rep.Error = err.Error()
		return
	}
	defer done()
	g := dist.Current()
	size := int64(atoiOr(os.Getenv("XLADDP_TEST_SIZE")))
	if g.Rank() == 0 {
		errs := []error{g.AllReduce(ctx, dist.Int64s([]int64{7}), dist.Max), g.AllReduce(ctx, dist.Int64s([]int64{0}), dist.Min),
			g.Broadcast(ctx, dist.Int64s([]int64{size}), 0)}
		if size > 0 && size < 1<<20 {
			garbage := make([]byte, (size+7)/8*8)
			for i := range garbage {
				garbage[i] = byte(i*31 + 7)
			}
			errs = append(errs, g.Broadcast(ctx, dist.ByteBuffer(dist.Int64, garbage), 0))
		}
		if err := errors.Join(errs...); err != nil {
			rep.Error = err.Error()
		}
		return
	}
	err = e.RunReplicas(ctx, 1, func(ctx context.Context, r xla.Replica) error {
		model, err := ddptest.NewModel(r.Device(), "toy", 3, nil)
		if err != nil {
			return err
		}
		ck, err := checkpoint.New(checkpoint.Options{Dir: os.Getenv("XLADDP_TEST_DIR")})
		if err != nil {
			return err
		}
		defer ck.Close()
		start := time.Now()
		c := optim.Checkpoint{Model: model}
		_, err = ck.Restore(ctx, &c)
		rep.Elapsed = time.Since(start).Seconds()
		return err
	})
	if err != nil {
		rep.Error = err.Error()
	}
}

// TestHealRefusesWhatNoModelHolds: a peer that says it holds a step and
// sends a size no state of the model can have (a petabyte, nothing) is
// refused before anything is allocated for it, naming the rank; bytes
// that are no checkpoint are refused by the decoder, naming the step and
// the rank.
func TestHealRefusesWhatNoModelHolds(t *testing.T) {
	for _, c := range []struct {
		size, want string
	}{
		{"1125899906842624", "rank 0 sends step 7 as 1125899906842624 bytes, outside what this model's state can be"},
		{"0", "rank 0 sends step 7 as 0 bytes"},
		{"4096", "step 7 from rank 0's memory"},
	} {
		t.Run(c.size, func(t *testing.T) {
			cmds, outs := ddptest.Launch(t, "heal-hostile", 2, "XLADDP_TEST_TIMEOUT=60s", "XLADDP_TEST_SIZE="+c.size, "XLADDP_TEST_DIR="+t.TempDir())
			reps := ddptest.WaitReports(t, cmds, outs)
			assert.Empty(t, reps[0].Error, "the hostile peer's side")
			assert.Contains(t, reps[1].Error, c.want)
			assert.Less(t, reps[1].Elapsed, 30.0, "refused, not waited for")
		})
	}
}
