package main

import (
	"bytes"
	"context"
	"image/png"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/examples/internal/exampletest"
	"github.com/xladdp/xladdp/xla"
)

func TestMain(m *testing.M) { exampletest.Main(m, "gpt", main) }

// tiny is a model that trains in seconds.
var tiny = []string{"--layers", "2", "--heads", "2", "--width", "64", "--block", "32", "--batch-size", "32", "--eval-iters", "4"}

// corpusOrSkip returns the fortunes directory. Without it a user who is
// not root cannot install it (make deps says so); root's make deps has.
func corpusOrSkip(t *testing.T) string {
	if _, err := os.Stat(filepath.Join(DefaultCorpus, "wisdom")); err != nil {
		if os.Geteuid() != 0 {
			t.Skipf("Debian's fortunes is missing and installing it needs root (sudo apt-get install fortunes): %v", err)
		}
		t.Fatalf("Debian's fortunes is missing (make deps installs it): %v", err)
	}
	return DefaultCorpus
}

// TestLearnsSpawnedAndResumes trains the tiny GPT on 2 CPU replicas for
// 120 steps: the val loss falls below 3.2 nats, under the 3.36 of the
// best model that ignores context (the val split's unigram entropy) from
// ln(113) = 4.73 at the start; the checkpoint, the plot and a sample are
// written. An eval step that is not a log step (--log-interval 100, the
// evals at 60 and 120) prints the train loss of its own step, read for
// it, never 0.0000 for a loss not read yet, and the progress counts on
// past the eval's checkpoint. A run resumed from the
// checkpoint continues at step 120.
func TestLearnsSpawnedAndResumes(t *testing.T) {
	exampletest.CleanEnv(t)
	dir := t.TempDir()
	ckpt, plot := filepath.Join(dir, "gpt.safetensors"), filepath.Join(dir, "curves.png")
	args := append([]string{"--spawn", "--cpu-devices", "2", "--data", corpusOrSkip(t), "--checkpoint", ckpt, "--eval-interval", "60"}, tiny...)
	var out bytes.Buffer
	res, err := run(t.Context(), append(args, "--steps", "120", "--sample", "60", "--plot", plot, "--metrics", "--log-interval", "100"), &out)
	require.NoError(t, err, out.String())
	t.Log(out.String())
	require.Len(t, res.ValLosses, 2)
	assert.Less(t, res.ValLoss, 3.2)
	assert.Less(t, res.ValLosses[1][1], res.ValLosses[0][1], "the val loss falls")
	assert.Equal(t, 120, res.GradientSyncs)
	assert.Positive(t, res.TokensPerSec, "measured")
	assert.Len(t, []rune(res.Sample), 60)
	assert.Contains(t, out.String(), "on 2 replicas")
	evals := regexp.MustCompile(`step (\d+): train loss (\S+),`).FindAllStringSubmatch(out.String(), -1)
	require.Len(t, evals, 2)
	for i, l := range evals {
		assert.Equal(t, strconv.Itoa(60*(i+1)), l[1])
		loss, err := strconv.ParseFloat(l[2], 64)
		require.NoError(t, err)
		assert.Greater(t, loss, 1.0, "step %s's train loss was read for its eval line", l[1])
	}
	assert.Contains(t, res.Losses, [2]float64{60, res.Losses[0][1]}, "the eval step's loss is a point of the curve")
	assert.Contains(t, out.String(), "steps step 100/120", "the progress counts on past the eval's checkpoint")
	assert.Contains(t, out.String(), "AllReduces:")
	f, err := os.Open(plot)
	require.NoError(t, err)
	_, err = png.Decode(f)
	require.NoError(t, f.Close())
	require.NoError(t, err)

	out.Reset()
	more, err := run(t.Context(), append(args, "--steps", "130", "--sample", "0", "--resume"), &out)
	require.NoError(t, err, out.String())
	assert.Equal(t, 120, more.ResumedAt)
	assert.Equal(t, 130, more.Steps)
	assert.Equal(t, 10, more.GradientSyncs)
	assert.Positive(t, more.TokensPerSec, "measured")
	assert.Less(t, more.ValLoss, 3.2)

	out.Reset()
	_, err = run(t.Context(), append(args, "--steps", "130", "--width", "32", "--resume"), &out)
	assert.ErrorContains(t, err, "a checkpoint resumes the same model and data flags only", "another model's checkpoint is refused")
	_, err = run(t.Context(), append(args, "--steps", "100", "--resume"), &out)
	assert.ErrorContains(t, err, "is at step 130, and --steps is 100: nothing to train; raise --steps")
}

// TestSameCommandAfterTheLastStep: a --checkpoint-dir at the last step
// (--checkpoint-every divides --steps, or a SIGTERM came as the job
// finished and it said "run the job again") makes the same command
// finish without training and write --checkpoint with those weights,
// where it used to refuse ("nothing to train") and fail the job.
func TestSameCommandAfterTheLastStep(t *testing.T) {
	exampletest.CleanEnv(t)
	dir := t.TempDir()
	final := filepath.Join(dir, "final.safetensors")
	args := append([]string{"--spawn", "--cpu-devices", "2", "--data", corpusOrSkip(t), "--steps", "4", "--sample", "0",
		"--checkpoint-every", "2", "--checkpoint-dir", filepath.Join(dir, "ck"), "--checkpoint", final}, tiny...)
	_, err := run(t.Context(), args, &bytes.Buffer{})
	require.NoError(t, err)
	want := exampletest.ModelTensors(t, final)
	require.NoError(t, os.Remove(final))
	var out bytes.Buffer
	res, err := run(t.Context(), args, &out)
	require.NoError(t, err, out.String())
	assert.Contains(t, out.String(), "is at step 4 of 4: training had finished, nothing left to train")
	assert.Equal(t, 4, res.Steps)
	assert.Equal(t, want, exampletest.ModelTensors(t, final), "--checkpoint holds the last step's weights")
	_, err = run(t.Context(), append(args, "--steps", "3"), &bytes.Buffer{})
	assert.ErrorContains(t, err, "is at step 4, and --steps is 3: nothing to train; raise --steps", "past the end is still refused")
}

// TestLongOneAllReducePerAccumulatedStep is the step's accounting over 1000
// micro-steps (250 optimizer steps of 4 micro-batches) with clipping,
// warmup+cosine and bf16, on 2 replicas: one gradient average per
// optimizer step (the in-graph all-reduces are one per parameter per
// step), nothing read from the device but what is read after the last
// step (train and val loss, the weights' digest), and every program
// compiled once: a run
// of 8 steps has the same programs.
func TestLongOneAllReducePerAccumulatedStep(t *testing.T) {
	exampletest.CleanEnv(t)
	args := []string{"--spawn", "--cpu-devices", "2", "--data", corpusOrSkip(t), "--layers", "1", "--heads", "2", "--width", "16",
		"--block", "8", "--batch-size", "16", "--grad-accum", "4", "--precision", "bf16", "--clip", "1", "--warmup", "5",
		"--eval-iters", "1", "--sample", "0"}
	programs := func(steps int) (result, xla.Metrics) {
		n := strconv.Itoa(steps)
		var out bytes.Buffer
		res, err := run(t.Context(), append(args, "--steps", n, "--log-interval", n, "--eval-interval", n), &out)
		require.NoError(t, err, out.String())
		return res, xla.GetMetrics()
	}
	short, shortMetrics := programs(8)
	res, m := programs(250)
	assert.Equal(t, 250, res.GradientSyncs)
	assert.EqualValues(t, 250*16, m.AllReduces, "16 parameters, one all-reduce each per optimizer step")
	assert.EqualValues(t, 2*2+2*16, m.TransfersToHost,
		"each replica reads its train loss and val loss once, and each of its 16 parameters once for the weights' digest, after the last step")
	assert.Equal(t, shortMetrics.Compilations+shortMetrics.PersistentCacheHits, m.Compilations+m.PersistentCacheHits,
		"no program is specific to a step, a learning rate or a gradient norm")
	assert.Positive(t, short.Compilations)
	assert.Less(t, res.ValLoss, short.ValLoss)
}

// TestLongUnderDdprun trains 2 ranks in 2 processes (the host
// all-reduce) with bf16 and 2 micro-steps per step: rank 0 alone reports.
// (make test covers the host path's GPT in package ddp.)
func TestLongUnderDdprun(t *testing.T) {
	exampletest.CleanEnv(t)
	cmd := exec.Command(exampletest.Ddprun(t), append([]string{"--nproc_per_node=2"}, exampletest.Self()...)...)
	cmd.Env = append(os.Environ(), exampletest.Env("gpt", append([]string{"--data", corpusOrSkip(t), "--steps", "20", "--eval-interval", "20",
		"--precision", "bf16", "--grad-accum", "2", "--sample", "0"}, tiny...)...)...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	done := regexp.MustCompile(`\[rank0\]:done: 20 steps, train loss (\S+), val loss (\S+), .* 20 gradient all-reduces`).FindSubmatch(out)
	require.NotNil(t, done, "%s", out)
	v, err := strconv.ParseFloat(string(done[2]), 64)
	require.NoError(t, err)
	assert.Less(t, v, 4.3, "below ln(113) = 4.73 after 20 steps")
	assert.NotContains(t, string(out), "[rank1]:done")
	assert.Contains(t, string(out), "on 2 replicas")
	assert.Contains(t, string(out), "bf16")
}

func TestBadInput(t *testing.T) {
	exampletest.CleanEnv(t)
	dir := t.TempDir()
	latin1, short := filepath.Join(dir, "latin1.txt"), filepath.Join(dir, "short.txt")
	require.NoError(t, os.WriteFile(latin1, append(bytes.Repeat([]byte("abc "), 50), 0xe9), 0o644))
	require.NoError(t, os.WriteFile(short, bytes.Repeat([]byte("to be or not "), 10), 0o644))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--size", "huge"}, `--size "huge": want small or full`},
		{[]string{"--heads", "3"}, "the width a multiple of the heads"},
		{[]string{"--precision", "fp16"}, `--precision "fp16": want fp32 or bf16`},
		{[]string{"--grad-accum", "0"}, "must be positive"},
		{[]string{"--steps", "-5"}, "must be positive"},
		{[]string{"--warmup", "600"}, "--warmup 600: must be from 0 to --steps - 1 (599)"},
		{[]string{"--dropout", "1"}, "--dropout 1: must be in [0, 1)"},
		{[]string{"--lr", "NaN"}, "--lr NaN must be positive"},
		{[]string{"--min-lr", "0.1"}, "--min-lr 0.1 in [0, lr]"},
		{[]string{"--clip", "-1"}, "--clip -1 >= 0"},
		{[]string{"--deterministic", "--grad-accum", "2"}, "the micro-shards are the accumulation"},
		{[]string{"--deterministic", "--micro-shard", "5"}, "does not divide the global batch of 32"},
		{[]string{"--resume"}, "--resume needs --checkpoint"},
		{[]string{"--spawn", "extra"}, `unexpected argument "extra"`},
		{[]string{"--spawn", "--data", "/nonexistent"}, "make deps installs Debian's fortunes"},
		{[]string{"--spawn", "--data", latin1}, "is not UTF-8 text"},
		{[]string{"--spawn", "--data", short}, "not more than --block 64"},
		{[]string{"--spawn", "--width", "100000", "--heads", "1", "--layers", "1"}, "needs 1.79e+03 GiB for its weights, gradients and AdamW state"},
		{[]string{"--spawn", "--layers", "100000000", "--width", "4096"}, "lower --layers, --width or --block"},
		{[]string{"--spawn", "--cpu-devices", "2", "--batch-size", "1"}, "--batch-size 1 is less than one row per replica (2)"},
		{[]string{"--spawn", "--resume", "--checkpoint", filepath.Join(dir, "none.safetensors")}, "none.safetensors"},
		{[]string{"--spawn", "--plot", filepath.Join(dir, "curves.jpg")}, "name a .png file"},
		{[]string{"--spawn", "--checkpoint", "/nonexistent/dir/c.safetensors"}, "--checkpoint /nonexistent/dir/c.safetensors: its directory"},
	} {
		_, err := run(context.Background(), tc.args, &bytes.Buffer{})
		require.Error(t, err, tc.args)
		assert.Contains(t, err.Error(), tc.want, tc.args)
	}
}

// TestLongBFloat16MatchesFloat32: the same 150 steps in bf16 compute and
// in fp32 reach val losses within 2% of each other (the policy keeps
// master weights, optimizer state, norms, softmax and the loss in fp32).
func TestLongBFloat16MatchesFloat32(t *testing.T) {
	exampletest.CleanEnv(t)
	args := append([]string{"--spawn", "--cpu-devices", "2", "--data", corpusOrSkip(t), "--steps", "150", "--eval-interval", "150",
		"--eval-iters", "20", "--sample", "0"}, tiny...)
	var out bytes.Buffer
	fp32, err := run(t.Context(), args, &out)
	require.NoError(t, err, out.String())
	bf16, err := run(t.Context(), append(args, "--precision", "bf16"), &out)
	require.NoError(t, err, out.String())
	t.Logf("val loss after 150 steps: fp32 %.4f, bf16 %.4f", fp32.ValLoss, bf16.ValLoss)
	assert.InDelta(t, fp32.ValLoss, bf16.ValLoss, 0.02*fp32.ValLoss)
	assert.Less(t, bf16.ValLoss, 3.2)
}

// TestDataFromDevicesAndPipes: --data that is not a regular file, run as
// a user runs the binary. /dev/zero is refused at its first chunk; a pipe
// that never ends (yes) at the size limit, holding no more than the
// limit and 64 MiB; a FIFO no process writes to ends on SIGTERM within a
// second instead of blocking.
func TestDataFromDevicesAndPipes(t *testing.T) {
	exampletest.CleanEnv(t)
	gpt := func(data string) *exec.Cmd {
		cmd := exec.Command(exampletest.Self()[0], exampletest.Self()[1:]...)
		cmd.Env = append(os.Environ(), exampletest.Env("gpt", "--spawn", "--data", data)...)
		return cmd
	}
	maxRSS := func(cmd *exec.Cmd) int64 { return cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss << 10 }

	zero := gpt("/dev/zero")
	out, err := zero.CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "/dev/zero: holds NUL bytes: not UTF-8 text")

	dir := t.TempDir()
	fifo := filepath.Join(dir, "text")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	yes := exec.Command("sh", "-c", "exec yes > "+fifo)
	require.NoError(t, yes.Start())
	defer func() { _ = yes.Process.Kill(); _ = yes.Wait() }()
	endless := gpt(fifo)
	out, err = endless.CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "more than 1024 MiB of text")
	t.Logf("max RSS reading an endless pipe: %d MiB", maxRSS(endless)>>20)
	assert.Less(t, maxRSS(endless), int64(maxCorpusBytes+64<<20), "the reader holds the limit and 64 MiB at most")

	silent := filepath.Join(dir, "silent")
	require.NoError(t, syscall.Mkfifo(silent, 0o600))
	waiting := gpt(silent)
	var output bytes.Buffer
	waiting.Stdout, waiting.Stderr = &output, &output
	require.NoError(t, waiting.Start())
	time.Sleep(500 * time.Millisecond)
	require.NoError(t, waiting.Process.Signal(syscall.SIGTERM))
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- waiting.Wait() }()
	select {
	case err := <-done:
		require.Error(t, err)
		assert.Less(t, time.Since(start), time.Second)
		assert.Contains(t, output.String(), "no process writes to")
	case <-time.After(10 * time.Second):
		_ = waiting.Process.Kill()
		<-done
		t.Fatalf("--data on a FIFO nobody writes ignored SIGTERM: %s", output.String())
	}
}

// TestLongPreemptedResumesBitIdentical: SIGTERM to ddprun (2 ranks, dropout
// on) at a random step: exit 75; the same command again resumes and ends
// with the uninterrupted run's weights, bit for bit.
// Three trials at different moments; then three kill -9s of a random
// rank under --max_restarts=2, restarted from the last periodic
// checkpoint to the same bits.
func TestLongPreemptedResumesBitIdentical(t *testing.T) {
	exampletest.CleanEnv(t)
	job := exampletest.Job{Name: "gpt", Launch: []string{"--nproc_per_node=2"}, Args: append(append([]string(nil), tiny...),
		"--data", corpusOrSkip(t), "--steps", "40", "--eval-interval", "20", "--dropout", "0.1", "--sample", "0",
		"--log-interval", "5", "--checkpoint-every", "6")}
	want := job.Weights(t)
	job.Trials(t, 3, want, exampletest.Marks("step %d/40", 10, 15, 20, 25))
}

// TestLongResumedOnAnotherReplicaCount (make test-long): a 4-replica job
// (--spawn) preempted mid-epoch resumes on 3 processes (ddprun), and a
// 2-process one with ZeRO on 4 replicas: each says what changed, and the
// sample logs show every training window of both epochs used exactly
// once (480 windows of 32 characters, a global batch of 24 on 4, 3 and 2
// replicas).
func TestLongResumedOnAnotherReplicaCount(t *testing.T) {
	exampletest.CleanEnv(t)
	text := filepath.Join(t.TempDir(), "text.txt")
	rng := rand.New(rand.NewPCG(7, 8))
	letters := make([]byte, 17080) // 90% for training: 480 windows of 32 and a character
	for i := range letters {
		letters[i] = "abcdefgh ijklmnop\n"[rng.IntN(18)]
	}
	require.NoError(t, os.WriteFile(text, letters, 0o644))
	exampletest.ResumeOnAnotherReplicaCount(t, "gpt", append(append([]string(nil), tiny...), "--batch-size", "24", "--steps", "40",
		"--eval-interval", "40", "--sample", "0", "--log-interval", "2", "--checkpoint-every", "3", "--data", text),
		480, exampletest.Marks("step %d/40", 10, 14))
}
