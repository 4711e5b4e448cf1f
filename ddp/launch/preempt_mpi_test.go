//go:build mpi

package launch

import (
	"testing"
)

// TestLongMPIPreemptionCheckpointsAndResumes is TestPreemptionCheckpointsAndResumes
// under mpirun: SIGTERM to ddprun reaches the ranks from ddprun itself
// (mpirun would give them 1 s), with the preemption grace to commit the
// checkpoint; ddprun exits 75 and the next launch resumes bit for bit.
// Without the rank-to-rank random states the resume would differ (the
// ranks are seeded apart).
func TestLongMPIPreemptionCheckpointsAndResumes(t *testing.T) {
	preemptAndResume(t, "preempt-mpi", []string{"--nproc_per_node=2", "--backend=mpi"})
}
