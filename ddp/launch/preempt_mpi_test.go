//go:build mpi

package launch

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/internal/workerenv"
)

// TestLongMPIPreemptionCheckpointsAndResumes is TestPreemptionCheckpointsAndResumes
// under mpirun: SIGTERM to ddprun reaches the ranks from ddprun itself
// (mpirun would give them 1 s), with the preemption grace to commit the
// checkpoint; ddprun exits 75 and the next launch resumes bit for bit.
// Without the rank-to-rank random states the resume would differ (the
// ranks are seeded apart).
func TestLongMPIPreemptionCheckpointsAndResumes(t *testing.T) {
	args := []string{"--nproc_per_node=2", "--backend=mpi"}
	whole := runAgent(t.Context(), t, "whole-preempt-mpi", "preemptible", args, "XLADDP_TEST_DIR="+t.TempDir())
	require.Equal(t, 0, whole.code, whole.stderr)
	want := finalParams(whole.stdout)
	require.NotEmpty(t, want)

	dir := t.TempDir()
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
	res := runAgent(ctx, t, "preempt-mpi", "preemptible", args, "XLADDP_TEST_DIR="+dir)
	t.Log(res.stderr)
	assert.Equal(t, workerenv.ExitPreempted, res.code, res.stderr)
	assert.Contains(t, res.stdout, "preempted after step")
	assert.Less(t, time.Since(signalled), 10*time.Second, "checkpointed within one step + 10 s")

	again := runAgent(t.Context(), t, "resume-mpi", "preemptible", args, "XLADDP_TEST_DIR="+dir)
	require.Equal(t, 0, again.code, again.stderr)
	assert.Contains(t, again.stdout, "resumed at ")
	assert.Equal(t, want, finalParams(again.stdout), "the resumed job's parameters differ from an uninterrupted run's")
}
