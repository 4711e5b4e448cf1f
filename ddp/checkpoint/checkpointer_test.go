package checkpoint_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/ddp/checkpoint"
	"github.com/xladdp/xladdp/ddp/internal/ddptest"
	"github.com/xladdp/xladdp/ddp/zero"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
	"github.com/xladdp/xladdp/xla/safetensors"
	"github.com/xladdp/xladdp/xla/xlatest"
)

// TestCheckpointerRefusesAndRestoresNothing: bad options are refused
// with what to give; an empty directory restores nothing; a SIGTERM is
// taken (the process goes on) until Close, which may come twice.
func TestCheckpointerRefusesAndRestoresNothing(t *testing.T) {
	_, err := checkpoint.New(checkpoint.Options{})
	assert.ErrorContains(t, err, "needs a directory")
	_, err = checkpoint.New(checkpoint.Options{Dir: t.TempDir(), Every: -1})
	assert.ErrorContains(t, err, "must not be negative")
	file := filepath.Join(t.TempDir(), "a-file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	_, err = checkpoint.New(checkpoint.Options{Dir: filepath.Join(file, "ck")})
	assert.ErrorContains(t, err, "checkpoint directory")

	ck, err := checkpoint.New(checkpoint.Options{Dir: t.TempDir(), Every: 5})
	require.NoError(t, err)
	ok, err := ck.Restore(t.Context(), &optim.Checkpoint{})
	require.NoError(t, err)
	assert.False(t, ok, "nothing to restore in an empty directory")
	// Delivered once this channel has it: the checkpointer's, listening
	// as long as this one, had it too. A sleep instead let a loaded
	// machine deliver it after Close, to SIGTERM's default: death.
	delivered := make(chan os.Signal, 1)
	signal.Notify(delivered, syscall.SIGTERM)
	defer signal.Stop(delivered)
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
	<-delivered
	ck.Close()
	ck.Close()
}

// TestCheckpointerKeepsAndReportsItsWrites: periodic checkpoints are
// written off the step, hold the state of their step while training
// goes on, and only Keep stay; a background write that fails (its
// directory removed) is the next Step's error, said once, and that
// Step writes nothing.
func TestCheckpointerKeepsAndReportsItsWrites(t *testing.T) {
	ctx := xlatest.Context(t)
	d := xlatest.NewEngine(t, 1).Device(0)
	model, err := ddptest.NewModel(d, "toy", 3, nil)
	require.NoError(t, err)
	opt, err := optim.NewSGD(nn.Parameters(model), optim.SGDConfig{LR: 0.1})
	require.NoError(t, err)
	dir := t.TempDir()
	ck, err := checkpoint.New(checkpoint.Options{Dir: dir, Every: 2, Keep: 2})
	require.NoError(t, err)
	defer ck.Close()
	atStep := map[int][]float32{}
	for step := 1; step <= 7; step++ {
		opt.ZeroGrad()
		require.NoError(t, optim.BackwardStep(ctx, nn.Parameters(model)[0].Square().Sum(), opt))
		v, err := nn.Parameters(model)[0].Float32s(ctx)
		require.NoError(t, err)
		atStep[step] = v
		require.NoError(t, ck.Step(ctx, optim.Checkpoint{Model: model, Optimizer: opt, Step: step}))
	}
	require.NoError(t, ck.Close())
	names, err := filepath.Glob(filepath.Join(dir, "step-*.safetensors"))
	require.NoError(t, err)
	require.Len(t, names, 2, "Keep: 2")
	for _, step := range []int{4, 6} {
		f, err := safetensors.ReadFile(filepath.Join(dir, fmt.Sprintf("step-%012d.safetensors", step)))
		require.NoError(t, err)
		w, ok := f.Lookup("model." + nn.StateDict(model)[0].Name)
		require.True(t, ok)
		assert.Equal(t, atStep[step], float32sOf(w.Data), "step %d's file holds step %d's values", step, step)
	}

	gone := filepath.Join(t.TempDir(), "gone")
	ck, err = checkpoint.New(checkpoint.Options{Dir: gone, Every: 1})
	require.NoError(t, err)
	require.NoError(t, os.RemoveAll(gone))
	c := optim.Checkpoint{Model: model, Optimizer: opt, Step: 1}
	require.NoError(t, ck.Step(ctx, c), "the write goes on in the background")
	c.Step = 2
	err = ck.Step(ctx, c)
	assert.ErrorContains(t, err, "writing the previous checkpoint")
	assert.ErrorContains(t, err, "gone")
	assert.NoError(t, ck.Close(), "the failure is said once; step 2 stopped before writing")
}

// float32sOf decodes little-endian float32s.
func float32sOf(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// TestCheckpointAcceptedBeforeSpawnReturnsIsWritten: a checkpoint that
// Step accepted and is still being written (a slow writer) when the
// training function returns survives Spawn closing the device: Spawn
// waits for it, Close reports no error, and the file holds the last
// step's values.
func TestCheckpointAcceptedBeforeSpawnReturnsIsWritten(t *testing.T) {
	checkpoint.SlowBackgroundWrites(t, 700*time.Millisecond)
	dir := t.TempDir()
	ck, err := checkpoint.New(checkpoint.Options{Dir: dir, Every: 3})
	require.NoError(t, err)
	var final []float32
	var name string
	start := time.Now()
	err = ddp.Spawn(xlatest.Context(t), func(ctx context.Context, w ddp.Worker) error {
		model, err := ddptest.NewModel(w.Device, "toy", 3, nil)
		if err != nil {
			return err
		}
		wrapped, err := ddp.Wrap(ctx, model)
		if err != nil {
			return err
		}
		opt, err := optim.NewSGD(nn.Parameters(wrapped), optim.SGDConfig{LR: 0.1})
		if err != nil {
			return err
		}
		for step := 1; step <= 3; step++ {
			opt.ZeroGrad()
			if err := optim.BackwardStep(ctx, nn.Parameters(wrapped)[0].Square().Sum(), opt); err != nil {
				return err
			}
			if err := ck.Step(ctx, optim.Checkpoint{Model: wrapped, Optimizer: opt, Step: step}); err != nil {
				return err
			}
		}
		if w.LocalRank == 0 {
			name = nn.StateDict(wrapped)[0].Name
			final, err = nn.Parameters(wrapped)[0].Float32s(ctx)
		}
		return err
	}, ddp.SpawnOptions{Devices: 2, Device: backend.Options{Target: backend.CPU}})
	require.NoError(t, err)
	assert.Greater(t, time.Since(start), 700*time.Millisecond, "Spawn returned before the slow write ended")
	require.NoError(t, ck.Close(), "the write Step accepted went through")
	f, err := safetensors.ReadFile(filepath.Join(dir, fmt.Sprintf("step-%012d.safetensors", 3)))
	require.NoError(t, err)
	w, ok := f.Lookup("model." + name)
	require.True(t, ok)
	assert.Equal(t, final, float32sOf(w.Data), "step 3's file holds step 3's values")
}

// TestCheckpointerRefusesTheOtherKind: a directory of single-file
// checkpoints given to a job whose optimizer is sharded (ZeRO), and a
// directory of sharded ones given to a plain job, are refused with what
// they hold and how to resume them, by the Checkpointer and by Load;
// neither is taken for an empty directory (a silent restart from step 0),
// and nothing in it changes.
func TestCheckpointerRefusesTheOtherKind(t *testing.T) {
	e := xlatest.NewEngine(t, 2)
	ctx := xlatest.Context(t)
	job := func(dir string, sharded bool, steps int) error {
		return e.RunReplicas(ctx, 2, func(ctx context.Context, r xla.Replica) error {
			model, err := ddptest.NewModel(r.Device(), "toy", 3, nil)
			if err != nil {
				return err
			}
			wrapped, err := ddp.Wrap(ctx, model)
			if err != nil {
				return err
			}
			sgd := func(groups []optim.ParamGroup) (optim.Optimizer, error) {
				return optim.NewSGD(groups[0].Params, optim.SGDConfig{LR: 0.1})
			}
			var opt optim.Optimizer
			if sharded {
				opt, err = zero.New(ctx, wrapped, nil, sgd)
			} else {
				opt, err = sgd([]optim.ParamGroup{{Params: nn.Parameters(wrapped)}})
			}
			if err != nil {
				return err
			}
			ck, err := checkpoint.New(checkpoint.Options{Dir: dir, Every: 1})
			if err != nil {
				return err
			}
			defer ck.Close()
			c := optim.Checkpoint{Model: wrapped, Optimizer: opt}
			if _, err := ck.Restore(ctx, &c); err != nil {
				return err
			}
			for c.Step < steps {
				opt.ZeroGrad()
				loss, err := ddptest.LossOn(r.Device(), wrapped, "toy", 0, 4)
				if err != nil {
					return err
				}
				if err := optim.BackwardStep(ctx, loss, opt); err != nil {
					return err
				}
				c.Step++
				if err := ck.Step(ctx, c); err != nil {
					return err
				}
			}
			return nil
		})
	}
	list := func(dir string) []string {
		names, err := filepath.Glob(filepath.Join(dir, "*"))
		require.NoError(t, err)
		return slices.DeleteFunc(names, func(n string) bool { return filepath.Base(n) == checkpoint.OwnerFile })
	}
	plainDir, shardedDir := t.TempDir(), t.TempDir()
	require.NoError(t, job(plainDir, false, 2))
	require.NoError(t, job(shardedDir, true, 2))
	plainFiles, shardedFiles := list(plainDir), list(shardedDir)
	require.Equal(t, []string{filepath.Join(plainDir, "step-000000000001.safetensors"), filepath.Join(plainDir, "step-000000000002.safetensors")}, plainFiles)
	require.Equal(t, []string{filepath.Join(shardedDir, "step-000000000001"), filepath.Join(shardedDir, "step-000000000002")}, shardedFiles)

	err := job(plainDir, true, 4)
	assert.ErrorContains(t, err, "step-000000000002.safetensors holds a single-file checkpoint")
	assert.ErrorContains(t, err, "without --zero")
	err = job(shardedDir, false, 4)
	assert.ErrorContains(t, err, "step-000000000002 holds a sharded checkpoint")
	assert.ErrorContains(t, err, "--zero")
	assert.Equal(t, plainFiles, list(plainDir), "nothing written over the refused directory")
	assert.Equal(t, shardedFiles, list(shardedDir))

	err = job(filepath.Join(t.TempDir(), "fresh"), true, 1)
	assert.NoError(t, err, "an empty directory is a fresh start of either kind")

	// A newest name that is not of its kind (a directory with a file's
	// name, a file with a directory's) is refused, naming it, whatever
	// the job's kind: never skipped for an older step.
	for _, sharded := range []bool{false, true} {
		odd := t.TempDir()
		require.NoError(t, os.Mkdir(filepath.Join(odd, "step-000000000009.safetensors"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(odd, "step-000000000008"), []byte("x"), 0o644))
		assert.ErrorContains(t, job(odd, sharded, 1), "step-000000000009.safetensors, is a directory, where a checkpoint file belongs")
		require.NoError(t, os.Remove(filepath.Join(odd, "step-000000000009.safetensors")))
		assert.ErrorContains(t, job(odd, sharded, 1), "step-000000000008, is a file, where a sharded checkpoint's directory belongs")
	}
}
