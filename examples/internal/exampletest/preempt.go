package exampletest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xladdp/xladdp/internal/procfs"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/internal/syncbuf"
	"github.com/xladdp/xladdp/internal/workerenv"
	"github.com/xladdp/xladdp/xla/safetensors"
)

// Job is an example's run, as a user starts it.
type Job struct {
	Name   string   // the example
	Launch []string // ddprun's flags; nil: the example alone (--spawn)
	Args   []string // the example's, without --checkpoint and --checkpoint-dir
	// Final names the file of --checkpoint-dir that holds the final
	// weights, for a program without --checkpoint (the toy: its last
	// step's checkpoint); "" means --checkpoint FILE.
	Final string
	// Fresh is a line only a run from the start prints, for a program
	// that does not say "resumed from" (the toy); "" for the others.
	Fresh string
}

// Weights runs job to its end and returns the final weights' model
// tensors: what a preempted and resumed job must end with.
func (job Job) Weights(t *testing.T) map[string][]byte {
	t.Helper()
	args, final := job.final(t.TempDir())
	out, err := job.command(t, args...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	return ModelTensors(t, final)
}

// final is the flags that keep job's state under dir, and the file its
// final weights end in.
func (job Job) final(dir string) (args []string, file string) {
	ckdir := filepath.Join(dir, "ck")
	if job.Final != "" {
		return []string{"--checkpoint-dir", ckdir}, filepath.Join(ckdir, job.Final)
	}
	final := filepath.Join(dir, "final.safetensors")
	return []string{"--checkpoint-dir", ckdir, "--checkpoint", final}, final
}

// Marks are the lines a job prints as it goes (format filled with each
// of at), in order: where a test preempts it.
func Marks(format string, at ...int) []string {
	marks := make([]string, len(at))
	for i, a := range at {
		marks[i] = fmt.Sprintf(format, a)
	}
	return marks
}

// PreemptAndResume runs job with --checkpoint-dir, preempts it (see
// Preempt), runs the same command again and checks that it resumes and
// ends with want's weights, bit for bit.
func (job Job) PreemptAndResume(t *testing.T, want map[string][]byte, marks []string, rng *rand.Rand) {
	t.Helper()
	args, final := job.final(t.TempDir())
	job.Preempt(t, args[1], marks, rng, args[2:]...)
	job.Resume(t, args[1], args[2:]...)
	assert.Equal(t, want, ModelTensors(t, final), "the resumed job's weights differ from the uninterrupted job's")
}

// Trials runs n trials of PreemptAndResume, then n of KillAndRestart
// when the job runs under ddprun, each a subtest with a moment of its own.
func (job Job) Trials(t *testing.T, n int, want map[string][]byte, marks []string) {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
	for i := range n {
		t.Run(fmt.Sprintf("SIGTERM %d", i+1), func(t *testing.T) { job.PreemptAndResume(t, want, marks, rng) })
	}
	for i := range n {
		if job.Launch != nil {
			t.Run(fmt.Sprintf("kill -9 %d", i+1), func(t *testing.T) { job.KillAndRestart(t, want, marks, rng) })
		}
	}
}

// Preempt runs job with --checkpoint-dir ckdir and extra flags, sends it
// SIGTERM (a Spot notice) at a random moment (see Running.Await), and
// checks that it checkpointed and exited 75.
func (job Job) Preempt(t *testing.T, ckdir string, marks []string, rng *rand.Rand, extra ...string) {
	t.Helper()
	r := job.start(t, append([]string{"--checkpoint-dir", ckdir}, extra...))
	moment := r.Await(t, marks, rng)
	require.NoError(t, r.cmd.Process.Signal(syscall.SIGTERM), "the job ended before SIGTERM (%s): %s", moment, r.out.String())
	err := <-r.ended
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "the job ended before SIGTERM (%s) reached it: %s", moment, r.out.String())
	require.Equal(t, workerenv.ExitPreempted, exit.ExitCode(), "%s", r.out.String())
	assert.Contains(t, r.out.String(), "preempted")
	t.Logf("SIGTERM %s: %s", moment, LineWith(r.out.String(), "preempted"))
}

// KillAndRestart runs job under ddprun --max_restarts=2 with
// --checkpoint-dir, SIGKILLs a random worker at a random moment (see
// Running.Await), and checks that ddprun restarted the job, which
// resumed and ended with want's weights, bit for bit.
func (job Job) KillAndRestart(t *testing.T, want map[string][]byte, marks []string, rng *rand.Rand) {
	t.Helper()
	require.NotNil(t, job.Launch, "kill -9 and a restart need ddprun")
	args, final := job.final(t.TempDir())
	job.Launch = append([]string{"--max_restarts=2"}, job.Launch...)
	r := job.start(t, args)
	moment := r.Await(t, marks, rng)
	// A restart resumes from a committed checkpoint: on a loaded machine
	// the first periodic one (written off the step) can still be on its
	// way at the moment drawn, and a restart from the start is then
	// right, but not what this trial tests.
	if waited := r.awaitCheckpoint(t, args[1]); waited > 0 {
		moment += fmt.Sprintf(", then %v for the first checkpoint", waited.Round(time.Millisecond))
	}
	workers := r.Workers()
	require.NotEmpty(t, workers, "ddprun (pid %d) has no workers %s: %s", r.cmd.Process.Pid, moment, r.out.String())
	victim := workers[rng.IntN(len(workers))]
	require.NoError(t, syscall.Kill(victim, syscall.SIGKILL))
	require.NoError(t, <-r.ended, "%s", r.out.String())
	require.Contains(t, r.out.String(), "restarting (restart 1 of 2)")
	restarted := r.out.String()[strings.Index(r.out.String(), "restarting (restart 1 of 2)"):]
	job.resumed(t, restarted, args[1])
	t.Logf("kill -9 %d %s: %s", victim, moment, LineWith(restarted, "restarting"))
	assert.Equal(t, want, ModelTensors(t, final), "the restarted job's weights differ from the uninterrupted job's")
}

// committedCheckpoint is a checkpoint under its final name: a file, or a
// sharded directory (".partial" until every replica wrote).
var committedCheckpoint = regexp.MustCompile(`^step-\d{12}(\.safetensors)?$`)

// awaitCheckpoint waits until ckdir holds a committed checkpoint
// (step-N, under its final name only once whole) and returns how long
// that took.
func (r *Running) awaitCheckpoint(t *testing.T, ckdir string) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		entries, _ := os.ReadDir(ckdir)
		for _, e := range entries {
			if committedCheckpoint.MatchString(e.Name()) {
				return time.Since(start)
			}
		}
		select {
		case err := <-r.ended:
			require.Fail(t, "the job ended before its first checkpoint", "%v: %s", err, r.out.String())
		case <-r.ctx.Done():
			require.Fail(t, "no checkpoint in "+ckdir+" within 2 minutes", "%s", r.out.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Running is a started command whose output the test reads as it comes.
type Running struct {
	cmd   *exec.Cmd
	out   *syncbuf.Buffer
	ended chan error
	ctx   context.Context
}

// start starts job with extra flags (see Start).
func (job Job) start(t *testing.T, extra []string) *Running {
	t.Helper()
	return Start(t, job.command(t, extra...))
}

// Start starts cmd with its output read as it comes; it is killed if the
// test ends first or after 2 minutes.
func Start(t *testing.T, cmd *exec.Cmd) *Running {
	t.Helper()
	r := &Running{cmd: cmd, out: &syncbuf.Buffer{}, ended: make(chan error, 1)}
	r.cmd.Stdout, r.cmd.Stderr = r.out, r.out
	require.NoError(t, r.cmd.Start())
	go func() { r.ended <- r.cmd.Wait() }()
	ctx, stop := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(stop)
	r.ctx = ctx
	t.Cleanup(func() {
		if r.cmd.ProcessState == nil {
			_ = r.cmd.Process.Kill()
		}
	})
	return r
}

// Await returns at a random moment of the job: after a random mark
// other than the first, by a random part of the time the job took to
// get there from the mark before. It follows the machine's speed; the
// job must have work left after its last mark. It says when it was.
func (r *Running) Await(t *testing.T, marks []string, rng *rand.Rand) string {
	t.Helper()
	require.GreaterOrEqual(t, len(marks), 2, "a random moment needs two marks to time the job by")
	reach := func(mark string) {
		select {
		case <-waitFor(r.ctx, r.out, mark):
		case err := <-r.ended:
			require.Fail(t, "the job ended before it printed "+mark, "%v: %s", err, r.out.String())
		case <-r.ctx.Done():
			_ = r.cmd.Process.Kill()
			require.Fail(t, "no "+mark+" within 2 minutes", "%v: %s", <-r.ended, r.out.String())
		}
	}
	at := 1 + rng.IntN(len(marks)-1)
	reach(marks[at-1])
	since := time.Now()
	reach(marks[at])
	delay := time.Duration(rng.Int64N(int64(time.Since(since)) + 1))
	time.Sleep(delay)
	return fmt.Sprintf("%v after %q", delay.Round(time.Millisecond), marks[at])
}

// Signal sends sig to the command and returns how it ended and its
// output.
func (r *Running) Signal(t *testing.T, sig syscall.Signal) (string, error) {
	t.Helper()
	require.NoError(t, r.cmd.Process.Signal(sig), "the command ended before %v: %s", sig, r.out.String())
	err := <-r.ended
	return r.out.String(), err
}

// Output is what the command printed so far.
func (r *Running) Output() string { return r.out.String() }

// Wait waits for the command to end and returns its output and how it
// ended.
func (r *Running) Wait() (string, error) {
	err := <-r.ended
	return r.out.String(), err
}

// Workers are the command's child processes (ddprun's workers).
func (r *Running) Workers() []int { return procfs.Children("/proc", r.cmd.Process.Pid) }

// Resume runs job with --checkpoint-dir ckdir and extra flags to its
// end, checks that it resumed, and returns its output.
func (job Job) Resume(t *testing.T, ckdir string, extra ...string) string {
	t.Helper()
	out, err := job.command(t, append([]string{"--checkpoint-dir", ckdir}, extra...)...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	job.resumed(t, string(out), ckdir)
	return string(out)
}

// resumed checks that out is a run that resumed from ckdir: it says so,
// or for a program that does not, it lacks Fresh.
func (job Job) resumed(t *testing.T, out, ckdir string) {
	t.Helper()
	if job.Fresh != "" {
		assert.NotContains(t, out, job.Fresh, "the run started afresh")
		return
	}
	t.Log(LineWith(out, "resumed from"))
	assert.Contains(t, out, "resumed from "+ckdir)
}

// waitFor is closed once out holds s; never if ctx ends first.
func waitFor(ctx context.Context, out *syncbuf.Buffer, s string) <-chan struct{} {
	seen := make(chan struct{})
	go func() {
		for !strings.Contains(out.String(), s) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
		close(seen)
	}()
	return seen
}

// command is job under ddprun (or, without Launch, the example alone)
// with extra flags for the example.
func (job Job) command(t *testing.T, extra ...string) *exec.Cmd {
	cmd := exec.Command(Self()[0], Self()[1:]...)
	if job.Launch != nil {
		cmd = exec.Command(Ddprun(t), append(append([]string(nil), job.Launch...), Self()...)...)
	}
	cmd.Env = append(os.Environ(), Env(job.Name, append(append([]string(nil), job.Args...), extra...)...)...)
	return cmd
}

// ModelTensors are the model's tensors of a checkpoint file, by name.
func ModelTensors(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := safetensors.ReadFile(path)
	require.NoError(t, err)
	out := map[string][]byte{}
	for _, tensor := range f.Tensors {
		if strings.HasPrefix(tensor.Name, "model.") {
			out[tensor.Name] = tensor.Data
		}
	}
	require.NotEmpty(t, out, "%s holds no model tensors", path)
	return out
}

// LineWith is the first line of out that holds s.
func LineWith(out, s string) string {
	for line := range strings.Lines(out) {
		if strings.Contains(line, s) {
			return strings.TrimSpace(line)
		}
	}
	return ""
}
