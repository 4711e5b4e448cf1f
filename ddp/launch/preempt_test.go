package launch

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/internal/workerenv"
)

// finalParams is rank 0's PARAMS line.
func finalParams(out string) string { return fieldAfter(out, "]:PARAMS ") }

// TestPreemptionCheckpointsAndResumes: SIGTERM to ddprun mid-run (a Spot
// notice) has every worker finish its step, commit a coordinated
// checkpoint and exit 75; ddprun exits 75 too, and the same command run
// again resumes and ends with the parameters of an uninterrupted run, bit
// for bit, dropout included (the ranks are seeded apart, so each needs
// its own random state back).
func TestPreemptionCheckpointsAndResumes(t *testing.T) {
	preemptAndResume(t, "preempt", []string{"--nproc_per_node=2"})
}

// preemptAndResume is TestPreemptionCheckpointsAndResumes with ddprun's
// args; mark names its processes.
func preemptAndResume(t *testing.T, mark string, args []string) {
	whole := runAgent(t.Context(), t, "whole-"+mark, "preemptible", args, "XLADDP_TEST_DIR="+t.TempDir())
	require.Equal(t, 0, whole.code, whole.stderr)
	want := finalParams(whole.stdout)
	require.NotEmpty(t, want)

	dir := t.TempDir()
	mark += strconv.FormatInt(time.Now().UnixNano(), 36)
	_, before := leftovers(t, mark)
	ctx, cancel := context.WithCancelCause(t.Context())
	var signalled time.Time
	go func() {
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if _, err := os.Stat(filepath.Join(dir, "at-10-1")); err == nil {
				break
			}
		}
		signalled = time.Now()
		cancel(context.Canceled) // what SIGTERM does to ddprun
	}()
	res := runAgent(ctx, t, mark, "preemptible", args, "XLADDP_TEST_DIR="+dir)
	assert.Equal(t, workerenv.ExitPreempted, res.code, res.stderr)
	assert.Contains(t, res.stderr, "ddprun: preempted")
	assert.Contains(t, res.stdout, "[rank0]:preempted after step")
	assert.Less(t, time.Since(signalled), 10*time.Second, "checkpointed within one step + 10 s")
	assertNothingLeft(t, mark, before)
	assert.Empty(t, res.flightDirsLeft(), "a preempted job leaves no flight directory")

	again := runAgent(t.Context(), t, mark, "preemptible", args, "XLADDP_TEST_DIR="+dir)
	require.Equal(t, 0, again.code, again.stderr)
	assert.Contains(t, again.stdout, "[rank0]:resumed at ")
	assert.Empty(t, again.flightDirsLeft(), "a clean job leaves no flight directory")
	t.Log(fieldAfter(res.stdout, "[rank0]:preempted"), "/", fieldAfter(again.stdout, "[rank0]:resumed"))
	assert.Equal(t, want, finalParams(again.stdout), "the resumed job's parameters differ from an uninterrupted run's")
}

// TestPreemptionNoticeToTheWorkers: SIGTERM reaches the workers, not
// ddprun (SLURM's --signal, a kill of the whole process group), rank 0
// at step 12 and rank 1 only after its commit: every worker exits 75,
// ddprun says preempted and exits 75 without restarting, and the same
// command resumes to the uninterrupted run's parameters, bit for bit.
func TestPreemptionNoticeToTheWorkers(t *testing.T) {
	args := []string{"--nproc_per_node=2", "--max_restarts=2"}
	whole := runAgent(t.Context(), t, "whole-notice", "preemptible", args, "XLADDP_TEST_DIR="+t.TempDir())
	require.Equal(t, 0, whole.code, whole.stderr)
	dir := t.TempDir()
	res := runAgent(t.Context(), t, "notice", "preemptible", args, "XLADDP_TEST_DIR="+dir, "XLADDP_TEST_TERM_AT=0:12")
	assert.Equal(t, workerenv.ExitPreempted, res.code, res.stderr)
	assert.Contains(t, res.stderr, "ddprun: preempted (SIGTERM reached the workers)")
	assert.NotContains(t, res.stderr, "restarting")
	assert.Contains(t, res.stdout, "[rank1]:preempted after step")
	again := runAgent(t.Context(), t, "notice", "preemptible", args, "XLADDP_TEST_DIR="+dir)
	require.Equal(t, 0, again.code, again.stderr)
	assert.Contains(t, again.stdout, "[rank0]:resumed at ")
	assert.Equal(t, finalParams(whole.stdout), finalParams(again.stdout), "the resumed job's parameters differ from an uninterrupted run's")
}

// killTrials kills a random rank at a random step with SIGKILL, trials
// times, under --max_restarts=3: each job resumes from its latest
// checkpoint and ends with the uninterrupted run's parameters, bit for
// bit, dropout included.
func killTrials(t *testing.T, trials int, seed uint64) {
	whole := runAgent(t.Context(), t, "whole-kill", "preemptible", []string{"--nproc_per_node=2"}, "XLADDP_TEST_DIR="+t.TempDir())
	require.Equal(t, 0, whole.code, whole.stderr)
	want := finalParams(whole.stdout)
	require.NotEmpty(t, want)
	rng := rand.New(rand.NewPCG(seed, 0))
	for trial := range trials {
		rank, step := rng.IntN(2), 1+rng.IntN(58) // preemptible runs 60 steps
		t.Run(fmt.Sprintf("trial %d: rank %d at step %d", trial, rank, step), func(t *testing.T) {
			res := runAgent(t.Context(), t, "kill-trial", "preemptible", []string{"--nproc_per_node=2", "--max_restarts=3"},
				"XLADDP_TEST_DIR="+t.TempDir(), fmt.Sprintf("XLADDP_TEST_KILL_AT=%d:%d", rank, step))
			require.Equal(t, 0, res.code, res.stderr)
			assert.Contains(t, res.stderr, "signal SIGKILL")
			assert.Contains(t, res.stderr, "restarting (restart 1 of 3)")
			assert.Equal(t, want, finalParams(res.stdout), "the restarted job's parameters differ from an uninterrupted run's")
		})
	}
}

// TestKillResumesBitIdentical: one trial of killTrials, a kill after the
// first checkpoints (make test-long runs 10 at random).
func TestKillResumesBitIdentical(t *testing.T) { killTrials(t, 1, 1) }

// TestLongKillResumesBitIdentical: the acceptance's 10 trials, at random
// ranks and steps (a new draw each run; the trial names say which).
func TestLongKillResumesBitIdentical(t *testing.T) { killTrials(t, 10, uint64(time.Now().UnixNano())) }
