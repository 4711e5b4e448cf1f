package examples

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
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

// TestOwnModuleBesideGoMLX: docs/own-module.md's GoMLX program, built as
// a module that requires today's GoMLX beside xladdp (one version of each
// module for the whole build), trains under ddprun with two ranks: GoMLX
// computes the targets on the same PJRT client, and the wrapped model's
// loss falls.
func TestOwnModuleBesideGoMLX(t *testing.T) {
	exampletest.CleanEnv(t)
	ddprun := exampletest.Ddprun(t)
	bin := buildGuideProgram(t, guideProgram{doc: "own-module.md", nth: 1, requires: []string{"github.com/gomlx/gomlx " + gomlxVersion(t)}}, "")
	run := runToEnd(t, []string{ddprun, "--nproc_per_node=2", bin})
	require.Equal(t, 0, run.code, run.out)
	losses := regexp.MustCompile(`step (50|100): loss (\d+\.\d{4})`).FindAllStringSubmatch(run.out, -1)
	require.Len(t, losses, 2, run.out)
	first, err := strconv.ParseFloat(losses[0][2], 64)
	require.NoError(t, err)
	last, err := strconv.ParseFloat(losses[1][2], 64)
	require.NoError(t, err)
	assert.Less(t, last, first, "the loss falls from step 50 to 100: %s", run.out)
}

// gomlxVersion is the GoMLX xladdp's go.mod requires, which the guide
// names.
func gomlxVersion(t *testing.T) string {
	t.Helper()
	goMod, err := os.ReadFile(filepath.Join("..", "go.mod"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^\s*github.com/gomlx/gomlx (v\S+)$`).FindSubmatch(goMod)
	require.NotNil(t, m, "go.mod requires GoMLX")
	guide, err := os.ReadFile(filepath.Join("..", "docs", "own-module.md"))
	require.NoError(t, err)
	assert.Contains(t, string(guide), "go get github.com/gomlx/gomlx@"+string(m[1]), "the guide names the GoMLX go.mod requires")
	return string(m[1])
}

// TestOwnModuleRefusesAnotherGoXLA: the GoMLX guide's program built
// with go-xla replaced (by the same code, from another directory, as a
// fork would be) refuses to open a device, naming the version to
// require, instead of reading a go-xla it was not written against.
func TestOwnModuleRefusesAnotherGoXLA(t *testing.T) {
	exampletest.CleanEnv(t)
	dir, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/gomlx/go-xla").Output()
	require.NoError(t, err)
	bin := buildGuideProgram(t, guideProgram{doc: "own-module.md", nth: 1,
		requires: []string{"github.com/gomlx/gomlx " + gomlxVersion(t)},
		replaces: []string{"github.com/gomlx/go-xla => " + strings.TrimSpace(string(dir))}}, "")
	run := runToEnd(t, []string{bin, "--spawn"})
	assert.NotEqual(t, 0, run.code, run.out)
	assert.Regexp(t, `github.com/gomlx/go-xla is v0\.4\.13 => \S+ \(devel\), but xladdp runs programs through its internals as of v0\.4\.13, unreplaced: drop the replace \(go mod edit -dropreplace=github.com/gomlx/go-xla\)`, run.out)
}
