package main

import (
	"bytes"
	"context"
	"image/png"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/examples/internal/exampletest"
)

func TestMain(m *testing.M) { exampletest.Main(m, "mnist", main) }

// TestLearnsSpawnedAndResumes trains the CNN spawned on 2 CPU replicas for
// 2 short epochs of MNIST's first 4096 digits: accuracy on the first 1000
// test digits passes 90% (chance is 10%), the loss
// falls, the second epoch's lower learning rate compiles nothing new,
// the checkpoint and the plot are written. A third epoch resumed from the
// checkpoint starts at epoch 2 and keeps learning.
func TestLearnsSpawnedAndResumes(t *testing.T) {
	exampletest.CleanEnv(t)
	exampletest.ColdCache(t) // it counts the compilations
	dir := t.TempDir()
	ckpt, plot := filepath.Join(dir, "mnist.safetensors"), filepath.Join(dir, "curves.png")
	args := []string{"--spawn", "--cpu-devices", "2", "--max-steps", "40", "--checkpoint", ckpt, "--test-batch-size", "500",
		"--data", exampletest.MNISTSubset(t, 4096, 1000)}
	var out bytes.Buffer
	one, err := run(t.Context(), append(args, "--epochs", "1"), &out)
	require.NoError(t, err, "MNIST must be installed (make deps): %s", out.String())
	out.Reset()
	two, err := run(t.Context(), append(args, "--epochs", "2", "--plot", plot, "--metrics"), &out)
	require.NoError(t, err, out.String())
	t.Log(out.String())
	assert.Greater(t, two.Accuracy, 0.90)
	assert.Less(t, two.FinalLoss, 1.0)
	assert.Positive(t, one.Compilations)
	assert.Zero(t, two.Compilations, "the programs of epoch 1 come from the disk cache, and epoch 2 (lr 0.7) needs no other")
	assert.Contains(t, out.String(), "batch 32 per replica (global 64)")
	assert.Contains(t, out.String(), "epoch 2: test accuracy")
	assert.Contains(t, out.String(), "Compilations:")
	// In-graph averaging: one program a step, no host all-reduce.
	assert.Regexp(t, `time per step over 40 steps: data \S+ ms, trace \S+ ms, execute \S+ ms(, loss read \S+ ms)? = \S+ ms; Go heap \d+ allocations`, out.String())
	assert.Greater(t, two.Split.PerStep("execute"), two.Split.PerStep("data"), "the loader's workers keep ahead of the step")
	f, err := os.Open(plot)
	require.NoError(t, err)
	img, err := png.Decode(f)
	require.NoError(t, f.Close())
	require.NoError(t, err)
	assert.Greater(t, img.Bounds().Dx(), 1000, "loss and accuracy side by side")

	out.Reset()
	three, err := run(t.Context(), append(args, "--epochs", "3", "--resume"), &out)
	require.NoError(t, err, out.String())
	assert.Equal(t, 2, three.ResumedAt)
	assert.Equal(t, 3, three.Epochs)
	assert.NotContains(t, out.String(), "epoch 1:")
	assert.Contains(t, out.String(), "Adadelta lr 0.49", "the resumed epoch has StepLR's learning rate")
	assert.Greater(t, three.Accuracy, 0.90)
}

func TestBadFlags(t *testing.T) {
	exampletest.CleanEnv(t)
	halfWritten := filepath.Join(t.TempDir(), "half.safetensors")
	require.NoError(t, os.WriteFile(halfWritten, []byte{0x40, 0, 0, 0, 0, 0, 0, 0, '{', '"'}, 0o644))
	halfWrittenDir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(halfWrittenDir, "step-000000000007.safetensors"), []byte{0x40, 0, 0, 0, 0, 0, 0, 0, '{', '"'}, 0o644))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--lr", "-1"}, "--lr=-1 must be positive"},
		{[]string{"--lr", "NaN"}, "must be positive"},
		{[]string{"--gamma", "1.5"}, "--gamma=1.5"},
		{[]string{"--epochs", "0"}, "must be positive"},
		{[]string{"--max-steps", "-3"}, "--max-steps=-3"},
		{[]string{"--resume"}, "--resume needs --checkpoint"},
		{[]string{"--spawn", "extra"}, `unexpected argument "extra"`},
		{[]string{"--spawn", "--data", "/nonexistent"}, "run `make deps` for MNIST"},
		{[]string{"--spawn", "--cpu-devices", "0"}, "want a count from 1"},
		{[]string{"--spawn", "--resume", "--checkpoint", "/nonexistent/c.safetensors", "--max-steps", "1"}, "c.safetensors"},
		{[]string{"--spawn", "--resume", "--checkpoint", halfWritten, "--max-steps", "1"}, "half.safetensors"},
		{[]string{"--spawn", "--max-steps", "1", "--plot", filepath.Join(t.TempDir(), "curves.jpg")}, "name a .png file"},
		// Larger than the training set: 0 steps used to run, exit 0 and
		// print "final loss 0.0000".
		{[]string{"--spawn", "--batch-size", "100000"}, "each of the 2 replicas reads 30000 of the 60000 training samples, " +
			"less than one batch of 50000: no step would run; lower the batch size"},
		// Refused before training, not when the plot is drawn at the end.
		{[]string{"--spawn", "--plot", "/nonexistent/dir/curves.png"}, "--plot /nonexistent/dir/curves.png: its directory"},
		{[]string{"--spawn", "--checkpoint", "/nonexistent/dir/c.safetensors"}, "--checkpoint /nonexistent/dir/c.safetensors: its directory"},
		{[]string{"--checkpoint-every", "-1"}, "want a count of steps, 0 or more"}, {[]string{"--checkpoint-every", "ten"}, "want a count of steps, 0 or more"},
		{[]string{"--checkpoint-dir", t.TempDir(), "--resume", "--checkpoint", halfWritten}, "drop --resume"},
		{[]string{"--spawn", "--checkpoint-dir", halfWritten, "--max-steps", "1"}, "--checkpoint-dir"},
		{[]string{"--spawn", "--sample-log", "/nonexistent/dir", "--max-steps", "1"}, "--sample-log"},
		// A checkpoint directory holding a half-written checkpoint (the
		// writer killed mid-save left it under the final name).
		{[]string{"--spawn", "--checkpoint-dir", halfWrittenDir, "--max-steps", "1"}, "step-000000000007.safetensors"},
		{[]string{"--spawn", "--deterministic", "--micro-shard", "10"}, "does not divide the global batch of 64"},
		{[]string{"--spawn", "--deterministic", "--micro-shard", "0"}, "want a sample count of at least 1"},
		{[]string{"--spawn", "--micro-shard", "16"}, "--micro-shard 16 without --deterministic"},
		{[]string{"--spawn", "--deterministic", "--micro-shard", "128"}, "does not divide the global batch of 64"},
	} {
		_, err := run(context.Background(), tc.args, &bytes.Buffer{})
		require.Error(t, err, tc.args)
		assert.Contains(t, err.Error(), tc.want, tc.args)
	}
}

// mnistJob is a short 2-rank run under ddprun with dropout, checkpoints
// every 4 steps and an epoch of 2 × 8-digit batches.
func mnistJob(t *testing.T) exampletest.Job {
	return exampletest.Job{Name: "mnist", Launch: []string{"--nproc_per_node=2"}, Args: []string{
		"--max-steps", "44", "--batch-size", "16", "--test-batch-size", "1000", "--checkpoint-every", "4", "--log-interval", "1",
		"--data", exampletest.MNISTSubset(t, 1024, 1000)}}
}

// TestForeignCheckpointDirIsRefused: a --checkpoint-dir whose latest
// checkpoint another program wrote (no position in it) is refused with
// what to do, never resumed from the start of an epoch.
func TestForeignCheckpointDirIsRefused(t *testing.T) {
	exampletest.CleanEnv(t)
	dir, data := t.TempDir(), exampletest.MNISTSubset(t, 128, 100)
	args := []string{"--spawn", "--cpu-devices", "1", "--batch-size", "16", "--test-batch-size", "100", "--max-steps", "2", "--data", data}
	_, err := run(t.Context(), append(args, "--checkpoint", filepath.Join(dir, "step-000000000002.safetensors")), &bytes.Buffer{})
	require.NoError(t, err)
	_, err = run(t.Context(), append(args, "--checkpoint-dir", dir), &bytes.Buffer{})
	assert.ErrorContains(t, err, "training.epoch_position is \"\", not a count")
	assert.ErrorContains(t, err, "move it away to start afresh")
}

// TestSameCommandAfterTheEnd: a --checkpoint-dir whose latest
// checkpoint is the last step (--checkpoint-every divides the run, or a
// SIGTERM came as it finished) makes the same command run again finish
// without a step, and say so: no "final loss 0.0000".
func TestSameCommandAfterTheEnd(t *testing.T) {
	exampletest.CleanEnv(t)
	dir, data := t.TempDir(), exampletest.MNISTSubset(t, 128, 100)
	args := []string{"--spawn", "--cpu-devices", "1", "--batch-size", "16", "--test-batch-size", "100", "--max-steps", "4",
		"--checkpoint-every", "2", "--checkpoint-dir", dir, "--data", data}
	first, err := run(t.Context(), args, &bytes.Buffer{})
	require.NoError(t, err)
	var out bytes.Buffer
	again, err := run(t.Context(), args, &out)
	require.NoError(t, err, out.String())
	assert.Contains(t, out.String(), "resumed from "+dir+" at step 4")
	assert.Contains(t, out.String(), "final loss none (no step left to train: resumed at the end)")
	assert.NotContains(t, out.String(), "0.0000")
	assert.Equal(t, first.Accuracy, again.Accuracy, "the same weights, tested again")
}

// TestLongPreemptedAndKilledTrials: SIGTERM to ddprun (2 ranks) at a
// random step of the epoch, three times: exit 75; the same command again
// resumes mid-epoch and ends with the uninterrupted run's weights, bit
// for bit (the loader's position, the dropout state and the optimizer's
// come back); then three kill -9s of a random rank under
// --max_restarts=2, restarted from the last periodic checkpoint to the
// same bits.
func TestLongPreemptedAndKilledTrials(t *testing.T) {
	exampletest.CleanEnv(t)
	job := mnistJob(t)
	job.Trials(t, 3, job.Weights(t), exampletest.Marks("step %d/44", 10, 20))
}

// TestLongResumedOnAnotherReplicaCount (make test-long): a 4-replica job (--spawn) preempted
// mid-epoch resumes on 3 processes (ddprun), and a 2-process one with
// ZeRO's sharded optimizer on 4 replicas: each says what changed, and the sample logs show every
// training sample of both epochs used exactly once (480 samples, a
// global batch of 24 on 4, 3 and 2 replicas).
func TestLongResumedOnAnotherReplicaCount(t *testing.T) {
	exampletest.CleanEnv(t)
	exampletest.ResumeOnAnotherReplicaCount(t, "mnist", []string{"--epochs", "2", "--batch-size", "24", "--test-batch-size", "100",
		"--log-interval", "1", "--checkpoint-every", "3", "--data", exampletest.MNISTSubset(t, 480, 100)},
		480, exampletest.Marks("epoch 1/2 step %d/20", 10, 20))
}

// TestLongStoppedRankIsNamedAndGoesOn: SIGSTOP a random rank of a 3-rank
// bin/mnist job under ddprun's defaults: within 75 s ddprun names it as
// stopped, with where the others wait (the collective's number and
// file:line); SIGCONT, and the job goes on and finishes. The same with
// --deterministic, whose exchange waits in its own collectives, and whose
// weights end as one replica's do.
func TestLongStoppedRankIsNamedAndGoesOn(t *testing.T) {
	exampletest.CleanEnv(t)
	data := exampletest.MNISTSubset(t, 2000, 1000)
	common := []string{"--max-steps", "60", "--batch-size", "30", "--test-batch-size", "1000", "--log-interval", "10", "--data", data}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"normal", nil},
		{"deterministic", []string{"--deterministic", "--micro-shard", "10"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string(nil), common...), tc.args...)
			cmd := exec.Command(exampletest.Ddprun(t), append([]string{"--nproc_per_node=3"}, exampletest.Self()...)...)
			cmd.Env = append(os.Environ(), exampletest.Env("mnist", args...)...)
			r := exampletest.Start(t, cmd)
			rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
			r.Await(t, exampletest.Marks("step %d/60", 10, 20), rng)
			workers := r.Workers()
			require.Len(t, workers, 3, r.Output())
			pid := workers[rng.IntN(len(workers))]
			require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
			stopped := time.Now()
			said := "is stopped (pid " + strconv.Itoa(pid) + "; kill -CONT " + strconv.Itoa(pid) + " resumes it)"
			require.Eventually(t, func() bool { return strings.Contains(r.Output(), said) }, 75*time.Second, 100*time.Millisecond,
				"no word of the stopped rank (pid %d) within 75 s: %s", pid, r.Output())
			t.Logf("said %s after SIGSTOP: %s", time.Since(stopped).Round(time.Second), exampletest.LineWith(r.Output(), said))
			assert.Regexp(t, `ranks? [0-9,]+ waits? in \w+ #\d+ at \S+\.go:\d+`, r.Output())
			require.NoError(t, syscall.Kill(pid, syscall.SIGCONT))
			out, err := r.Wait()
			require.NoError(t, err, "%s", out)
			assert.Contains(t, out, "done: 1 epoch(s)")
			if tc.args != nil {
				alone := exampletest.Spawned(1).Run(t, "mnist", args...)
				assert.Equal(t, exampletest.WeightsDigest(t, alone), exampletest.WeightsDigest(t, out),
					"the job with a stopped and continued rank trained other weights than one replica")
			}
		})
	}
}
