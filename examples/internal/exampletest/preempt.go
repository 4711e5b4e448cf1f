package exampletest

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/internal/workerenv"
	"github.com/xladdp/xladdp/xla/safetensors"
)

// Job is an example's run, as a user starts it.
type Job struct {
	Name   string   // the example
	Launch []string // ddprun's flags; nil: the example alone (--spawn)
	Args   []string // the example's, without --checkpoint and --checkpoint-dir
}

// Weights runs job to its end with --checkpoint and returns the final
// file's model tensors: what a preempted and resumed job must end with.
func (job Job) Weights(t *testing.T) map[string][]byte {
	t.Helper()
	final := filepath.Join(t.TempDir(), "final.safetensors")
	out, err := job.command(t, "--checkpoint", final).CombinedOutput()
	require.NoError(t, err, "%s", out)
	return ModelTensors(t, final)
}

// PreemptAndResume runs job with --checkpoint-dir, sends it SIGTERM (a
// Spot notice) at a random time within window after the output shows
// after, checks that it exits 75, runs the same command again and checks
// that it resumes and ends with want's weights, bit for bit.
func (job Job) PreemptAndResume(t *testing.T, want map[string][]byte, after string, window time.Duration, rng *rand.Rand) {
	t.Helper()
	dir := t.TempDir()
	final, ckdir := filepath.Join(dir, "final.safetensors"), filepath.Join(dir, "ck")
	job.Preempt(t, ckdir, after, window, rng, "--checkpoint", final)
	job.Resume(t, ckdir, "--checkpoint", final)
	assert.Equal(t, want, ModelTensors(t, final), "the resumed job's weights differ from the uninterrupted job's")
}

// Preempt runs job with --checkpoint-dir ckdir and extra flags, sends it
// SIGTERM at a random time within window after the output shows after,
// and checks that it checkpointed and exited 75.
func (job Job) Preempt(t *testing.T, ckdir, after string, window time.Duration, rng *rand.Rand, extra ...string) {
	t.Helper()
	cmd := job.command(t, append([]string{"--checkpoint-dir", ckdir}, extra...)...)
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	ended := make(chan error, 1)
	go func() { ended <- cmd.Wait() }()
	ctx, stop := context.WithTimeout(t.Context(), 2*time.Minute)
	defer stop()
	var err error
	select {
	case <-waitFor(ctx, &out, after):
		time.Sleep(time.Duration(rng.Int64N(int64(window))))
		require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
		err = <-ended
	case err = <-ended:
		require.Fail(t, "the job ended before it printed "+after, "%v: %s", err, out.String())
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		require.Fail(t, "no "+after+" within 2 minutes", "%s", <-ended, out.String())
	}
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "%s", out.String())
	require.Equal(t, workerenv.ExitPreempted, exit.ExitCode(), "%s", out.String())
	assert.Contains(t, out.String(), "preempted")
	t.Log(lineWith(out.String(), "preempted"))
}

// Resume runs job with --checkpoint-dir ckdir and extra flags to its
// end, checks that it resumed, and returns its output.
func (job Job) Resume(t *testing.T, ckdir string, extra ...string) string {
	t.Helper()
	out, err := job.command(t, append([]string{"--checkpoint-dir", ckdir}, extra...)...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	t.Log(lineWith(string(out), "resumed from"))
	assert.Contains(t, string(out), "resumed from "+ckdir)
	return string(out)
}

// waitFor is closed once out holds s; never if ctx ends first.
func waitFor(ctx context.Context, out *lockedBuffer, s string) <-chan struct{} {
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

// lineWith is the first line of out that holds s.
func lineWith(out, s string) string {
	for line := range strings.Lines(out) {
		if strings.Contains(line, s) {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

// lockedBuffer is a bytes.Buffer the process's two streams and the test
// share.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
