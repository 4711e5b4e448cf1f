package checkpoint_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/ddp/checkpoint"
	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/ddp/internal/ddptest"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
	"github.com/xladdp/xladdp/xla/xlatest"
)

func init() { ddptest.Scenarios["resume"] = resumeScenario }

const (
	resumeSteps = 20
	resumeEvery = 5
)

// resumeScenario trains the CNN (SGD with momentum, BatchNorm) on this
// rank's quarter of the batch, resuming from $XLADDP_TEST_DIR/ckpt if it
// exists and checkpointing every resumeEvery steps; rank 1 kills itself
// with SIGKILL when it reaches step $XLADDP_TEST_KILL_AT.
func resumeScenario(rep *ddptest.Report) {
	ctx := context.Background()
	killAt, err := strconv.Atoi(os.Getenv("XLADDP_TEST_KILL_AT"))
	if err != nil {
		killAt = -1
	}
	path := filepath.Join(os.Getenv("XLADDP_TEST_DIR"), "ckpt.safetensors")
	e, done, err := ddptest.JoinJob(ctx, 1)
	if err != nil {
		rep.Error = err.Error()
		return
	}
	defer done()
	d := e.Device(0)
	params, err := func() ([][]float32, error) {
		model, err := ddptest.NewModel(d, "cnn", 100+uint64(dist.Rank()), nil)
		if err != nil {
			return nil, err
		}
		m, err := ddp.Wrap(ctx, model)
		if err != nil {
			return nil, err
		}
		opt, err := optim.NewSGD(nn.Parameters(m), optim.SGDConfig{LR: 0.05, Momentum: 0.9})
		if err != nil {
			return nil, err
		}
		c := optim.Checkpoint{Model: m, Optimizer: opt}
		if _, err := os.Stat(path); err == nil {
			if err := checkpoint.Load(ctx, path, &c); err != nil {
				return nil, err
			}
			rep.Hashes["resumed at"] = strconv.Itoa(c.Step)
		}
		rows := ddptest.GlobalRows / dist.WorldSize()
		for step := c.Step; step < resumeSteps; step++ {
			if step == killAt && dist.Rank() == 1 {
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
			opt.ZeroGrad()
			loss, err := ddptest.LossOn(d, m, "cnn", dist.Rank()*rows, (dist.Rank()+1)*rows)
			if err != nil {
				return nil, err
			}
			if err := loss.Backward(); err != nil {
				return nil, err
			}
			if err := opt.Step(); err != nil {
				return nil, err
			}
			if err := d.MarkStep(ctx); err != nil {
				return nil, err
			}
			if (step+1)%resumeEvery == 0 {
				if err := checkpoint.Save(ctx, path, optim.Checkpoint{Model: m, Optimizer: opt, Step: step + 1}); err != nil {
					return nil, err
				}
			}
		}
		out, err := ddptest.ParameterValues(ctx, m)
		if err != nil {
			return nil, err
		}
		rep.Hashes["parameters"] = ddptest.HashParams(out)
		for _, t := range nn.StateDict(m) {
			v, err := xla.Values[float32](ctx, t.Tensor.Cast(xla.Float32))
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	}()
	if err != nil {
		rep.Error = err.Error()
		return
	}
	rep.Hashes["state"] = ddptest.HashParams(params)
}

// TestCheckpointResumeAfterSIGKILL: a 2-process training killed (SIGKILL,
// rank 1 at step 12) after its step-10 checkpoint, and restarted, resumes
// at step 10 and ends with the model state (parameters and BatchNorm
// buffers) bit-identical to an uninterrupted run's. The temporary file a
// writer killed mid-save leaves is never picked up.
func TestCheckpointResumeAfterSIGKILL(t *testing.T) {
	run := func(dir string, killAt int) []ddptest.Report {
		cmds, outs := ddptest.Launch(t, "resume", 2, "XLADDP_TEST_TIMEOUT=30s", "XLADDP_TEST_DIR="+dir,
			"XLADDP_TEST_KILL_AT="+strconv.Itoa(killAt))
		return ddptest.WaitReports(t, cmds, outs)
	}
	whole := run(t.TempDir(), -1)
	for r, rep := range whole {
		require.Empty(t, rep.Error, "uninterrupted run, rank %d", r)
	}

	dir := t.TempDir()
	cmds, outs := ddptest.Launch(t, "resume", 2, "XLADDP_TEST_TIMEOUT=30s", "XLADDP_TEST_DIR="+dir, "XLADDP_TEST_KILL_AT=12")
	err := cmds[1].Wait()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, syscall.SIGKILL, exit.Sys().(syscall.WaitStatus).Signal(), "rank 1 was not killed")
	require.NoError(t, cmds[0].Wait())
	last := strings.TrimSpace(outs[0].String())
	assert.Contains(t, last, "rank 1", "rank 0 does not name the dead rank: %s", last)
	// What a writer killed mid-save leaves: never read.
	require.NoError(t, os.WriteFile(filepath.Join(dir, ".ckpt.safetensors.tmp-999"), []byte("half"), 0o600))

	resumed := run(dir, -1)
	for r, rep := range resumed {
		require.Empty(t, rep.Error, "resumed run, rank %d", r)
		assert.Equal(t, "10", rep.Hashes["resumed at"], "rank %d", r)
		assert.Equal(t, whole[r].Hashes["state"], rep.Hashes["state"], "rank %d: resumed state differs from the uninterrupted run's", r)
		// Buffers hold each rank's last batch statistics, as in torch.
		assert.Equal(t, whole[0].Hashes["parameters"], rep.Hashes["parameters"], "rank %d's parameters differ from rank 0's", r)
	}
}

// TestLoadCheckpointRefusesDamage: a truncated, empty or foreign file is
// an error naming the file, and the model keeps its values.
func TestLoadCheckpointRefusesDamage(t *testing.T) {
	e := xlatest.NewEngine(t, 1)
	ctx := xlatest.Context(t)
	d := e.Device(0)
	model, err := ddptest.NewModel(d, "toy", 1, nil)
	require.NoError(t, err)
	opt, err := optim.NewSGD(nn.Parameters(model), optim.SGDConfig{LR: 0.1, Momentum: 0.5})
	require.NoError(t, err)
	dir := t.TempDir()
	good := filepath.Join(dir, "good.safetensors")
	require.NoError(t, checkpoint.Save(ctx, good, optim.Checkpoint{Model: model, Optimizer: opt, Step: 3}))
	data, err := os.ReadFile(good)
	require.NoError(t, err)
	before, err := nn.Parameters(model)[0].Float32s(ctx)
	require.NoError(t, err)
	other, err := ddptest.NewModel(d, "cnn", 1, nil)
	require.NoError(t, err)
	otherPath := filepath.Join(dir, "other.safetensors")
	require.NoError(t, checkpoint.Save(ctx, otherPath, optim.Checkpoint{Model: other}))
	for name, content := range map[string][]byte{
		"truncated": data[:len(data)/2],
		"empty":     {},
		"garbage":   []byte("not a checkpoint at all"),
	} {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, content, 0o600))
		err := checkpoint.Load(ctx, path, &optim.Checkpoint{Model: model, Optimizer: opt})
		assert.ErrorContains(t, err, path, name)
	}
	err = checkpoint.Load(ctx, otherPath, &optim.Checkpoint{Model: model, Optimizer: opt})
	assert.Error(t, err, "a checkpoint of another model")
	err = checkpoint.Load(ctx, filepath.Join(dir, "missing"), &optim.Checkpoint{Model: model})
	assert.True(t, errors.Is(err, os.ErrNotExist), "%v", err)
	after, err := nn.Parameters(model)[0].Float32s(ctx)
	require.NoError(t, err)
	assert.Equal(t, before, after, "a failed load changed the model")
	c := optim.Checkpoint{Model: model, Optimizer: opt}
	require.NoError(t, checkpoint.Load(ctx, good, &c))
	assert.Equal(t, 3, c.Step)
}

// TestSaveStateDictFromReplicaZero: two replicas of one process, each
// with a differently seeded (unwrapped) model, both call SaveStateDict;
// the file holds replica 0's values under torch's plain names, with the
// metadata, and loads into a fresh model. A path that cannot be written
// is every replica's error, naming it.
func TestSaveStateDictFromReplicaZero(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "model.safetensors")
	want := make(chan []float32, 1)
	save := func(path string) func(context.Context, ddp.Worker) error {
		return func(ctx context.Context, w ddp.Worker) error {
			model, err := ddptest.NewModel(w.Device, "toy", 7+uint64(w.Rank), nil)
			if err != nil {
				return err
			}
			if w.Rank == 0 {
				v, err := nn.Parameters(model)[0].Float32s(ctx)
				if err != nil {
					return err
				}
				want <- v
			}
			return checkpoint.SaveStateDict(ctx, path, model, map[string]string{"classes": `["a","b"]`})
		}
	}
	require.NoError(t, ddp.Spawn(t.Context(), save(path), ddp.SpawnOptions{Devices: 2, Device: backend.Options{Target: backend.CPU}}))

	ctx := xlatest.Context(t)
	d := xlatest.NewEngine(t, 1).Device(0)
	fresh, err := ddptest.NewModel(d, "toy", 99, nil)
	require.NoError(t, err)
	meta, err := nn.LoadStateDict(path, fresh)
	require.NoError(t, err, "plain torch names load into the unwrapped model")
	assert.Equal(t, `["a","b"]`, meta["classes"])
	got, err := nn.Parameters(fresh)[0].Float32s(ctx)
	require.NoError(t, err)
	assert.Equal(t, <-want, got, "the file holds replica 0's values")

	bad := filepath.Join(dir, "missing-dir", "model.safetensors")
	err = ddp.Spawn(t.Context(), save(bad), ddp.SpawnOptions{Devices: 2, Device: backend.Options{Target: backend.CPU}})
	assert.ErrorContains(t, err, "missing-dir")
	<-want
}
