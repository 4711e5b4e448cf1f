package examples

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/examples/internal/exampletest"
	"github.com/xladdp/xladdp/internal/workerenv"
)

// ownModules are the guide's program built once per test process, by
// build tags (linking costs seconds).
var ownModules struct {
	sync.Mutex
	bins map[string]string
}

// buildOwnModule builds docs/own-module.md's program as a module of its
// own that requires xladdp through a replace directive (the module is not
// on the proxy), as the guide tells users to, with the build tags given;
// once per test process and tags.
func buildOwnModule(t *testing.T, tags string) string {
	return buildGuideProgram(t, "own-module.md", tags)
}

// buildGuideProgram builds the first Go program of docs/guide as
// buildOwnModule does; once per test process, guide and tags.
func buildGuideProgram(t *testing.T, guideName, tags string) string {
	t.Helper()
	ownModules.Lock()
	defer ownModules.Unlock()
	key := guideName + " " + tags
	if bin, ok := ownModules.bins[key]; ok {
		return bin
	}
	guide, err := os.ReadFile(filepath.Join("..", "docs", guideName))
	require.NoError(t, err)
	program := regexp.MustCompile("(?s)```go\n(package main\n.*?)```").FindStringSubmatch(string(guide))
	require.NotNil(t, program, "docs/%s's program", guideName)
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	dir := exampletest.BuildDir(t, "own-module-")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(program[1]), 0o644))
	goMod := "module example.com/yourprog\n\ngo 1.24\n\nrequire github.com/xladdp/xladdp v0.0.0\n\nreplace github.com/xladdp/xladdp => " + root + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(goMod), 0o644))
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644))

	bin := filepath.Join(dir, "yourprog")
	build := exec.Command("go", "build", "-mod=mod", "-tags", tags, "-o", bin, ".")
	build.Dir = dir
	// Everything it needs is in the module cache already (this module's
	// own dependencies): no network.
	build.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	if ownModules.bins == nil {
		ownModules.bins = map[string]string{}
	}
	ownModules.bins[key] = bin
	return bin
}

// preemptSteps makes the guide's program run long enough (a few seconds)
// to be stopped well inside its run.
const preemptSteps = "2000"

// TestOwnModulePreemptedAndResumed: the guide's program, built as a
// module of its own, trains to the same bits under ddprun and --spawn,
// and, SIGTERMed
// mid-run the way each launch mode is stopped (ddprun, the process of a
// --spawn job; ddprun over mpirun in
// TestLongOwnModulePreemptedOverMpirun), commits a checkpoint on every
// rank: the program (or ddprun) exits 75, and the same command run again
// resumes and ends with the weights of a run never stopped, bit for bit.
func TestOwnModulePreemptedAndResumed(t *testing.T) {
	exampletest.CleanEnv(t)
	ddprun := exampletest.Ddprun(t)
	var whole sync.Map // launch mode → the uninterrupted run's weights
	t.Run("modes", func(t *testing.T) {
		t.Run("ddprun", func(t *testing.T) {
			t.Parallel()
			whole.Store("ddprun", preemptOwnModule(t, false, func(bin, dir string) []string {
				return []string{ddprun, "--nproc_per_node=2", bin, "--steps", preemptSteps, "--checkpoint-dir", dir, "--checkpoint-every", "50"}
			}))
		})
		t.Run("spawn", func(t *testing.T) {
			t.Parallel()
			whole.Store("spawn", preemptOwnModule(t, false, func(bin, dir string) []string {
				return []string{bin, "--spawn", "--cpu-devices", "2", "--steps", preemptSteps, "--checkpoint-dir", dir, "--checkpoint-every", "50"}
			}))
		})
	})
	// One rule seeds the replicas in every launch mode (each from its
	// global index): the unseeded RandN data, and so the weights, are the
	// same bits under ddprun and --spawn.
	ranks, _ := whole.Load("ddprun")
	spawned, _ := whole.Load("spawn")
	assert.Equal(t, spawned, ranks, "--spawn and ddprun train on the same numbers")
}

// TestLongOwnModulePreemptedOverMpirun is TestOwnModulePreemptedAndResumed
// under ddprun --backend=mpi (the program built with -tags mpi).
func TestLongOwnModulePreemptedOverMpirun(t *testing.T) {
	exampletest.CleanEnv(t)
	ddprun := exampletest.Ddprun(t)
	preemptOwnModule(t, true, func(bin, dir string) []string {
		return []string{ddprun, "--nproc_per_node=2", "--backend=mpi", bin, "--steps", preemptSteps, "--checkpoint-dir", dir, "--checkpoint-every", "50"}
	})
}

// preemptOwnModule runs the guide's program whole, then SIGTERMed after
// its first checkpoint and again to its end, with the command cmd makes
// (on the mpi transport with mpi); it returns the whole run's weights.
func preemptOwnModule(t *testing.T, mpi bool, cmd func(bin, dir string) []string) string {
	t.Helper()
	tags := ""
	if mpi {
		exampletest.Mpirun(t)
		if exec.Command("pkg-config", "--exists", "ompi-c").Run() != nil {
			t.Skip("libopenmpi-dev is missing, so the program cannot be built with the mpi backend (make deps installs it as root)")
		}
		tags = "mpi"
	}
	bin := buildOwnModule(t, tags)
	whole := runToEnd(t, cmd(bin, t.TempDir()))
	require.Equal(t, 0, whole.code, whole.out)
	assert.Regexp(t, `step 200: loss \d+\.\d{4}`, whole.out, "the guide's program, as the guide says")
	want := weightsLine(whole.out)
	require.NotEmpty(t, want, whole.out)

	dir := t.TempDir()
	stopped := runAndTerminate(t, cmd(bin, dir), filepath.Join(dir, "step-000000000050.safetensors"))
	require.Equal(t, workerenv.ExitPreempted, stopped.code, stopped.out)
	assert.Empty(t, weightsLine(stopped.out), "the stopped run did not finish: %s", stopped.out)

	again := runToEnd(t, cmd(bin, dir))
	require.Equal(t, 0, again.code, again.out)
	assert.Contains(t, again.out, "resumed at step ")
	assert.Equal(t, want, weightsLine(again.out), "the resumed job's weights differ from an uninterrupted run's")
	return want
}

// jobResult is how a command ended: its exit status and its output.
type jobResult struct {
	code int
	out  string
}

// runToEnd runs argv and waits for it (at most two minutes).
func runToEnd(t *testing.T, argv []string) jobResult {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), argv[0], argv[1:]...)
	cmd.WaitDelay = 2 * time.Minute
	out, err := cmd.CombinedOutput()
	return jobResult{exitCode(t, err), string(out)}
}

// runAndTerminate starts argv, sends it SIGTERM once marker exists (the
// job's first checkpoint), and waits for it to end.
func runAndTerminate(t *testing.T, argv []string, marker string) jobResult {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.After(time.Minute)
	for {
		if _, err := os.Stat(marker); err == nil {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("the job ended (%v) before its first checkpoint: %s", err, out.String())
		case <-deadline:
			_ = cmd.Process.Kill()
			<-done
			t.Fatalf("no %s within a minute: %s", marker, out.String())
		case <-time.After(5 * time.Millisecond):
		}
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-done:
		return jobResult{exitCode(t, err), out.String()}
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("still running a minute after SIGTERM: %s", out.String())
		return jobResult{}
	}
}

// exitCode is the exit status in a command's Wait error.
func exitCode(t *testing.T, err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	require.NoError(t, err)
	return 0
}

// weightsLine is the program's "weights [...]" line ("" when none).
func weightsLine(out string) string {
	for line := range strings.Lines(out) {
		if _, after, ok := strings.Cut(line, "weights "); ok {
			return strings.TrimSpace(after)
		}
	}
	return ""
}
