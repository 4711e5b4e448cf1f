package workertest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/internal/workerenv"
)

// MPIResult is what an mpirun job left: each rank's report (nil for a
// rank that wrote none), mpirun's output and exit error, and its time.
type MPIResult struct {
	Reps    []*Report
	Output  string
	Err     error
	Elapsed time.Duration
}

// MPIRun starts np ranks of scenario on the mpi backend under mpirun,
// stopping it after limit; started (may be nil) runs while they do, given
// the report directory.
func MPIRun(t *testing.T, limit time.Duration, scenario string, np int, started func(dir string), env ...string) MPIResult {
	t.Helper()
	mpirun, err := exec.LookPath("mpirun")
	require.NoError(t, err, "the mpi backend's tests need Open MPI's mpirun (make deps installs it)")
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, mpirun, "--allow-run-as-root", "--oversubscribe", "-np", strconv.Itoa(np), os.Args[0], "-test.run=^$")
	// torchrun's placement cleared (MPI gives the ranks); Open MPI's own
	// are mpirun's to set.
	cmd.Env = append(os.Environ(), workerenv.Rank+"=", workerenv.WorldSize+"=", workerenv.LocalRank+"=",
		workerenv.LocalWorldSize+"=", Env+"="+scenario, ReportDirEnv+"="+dir, workerenv.Transport+"=mpi", "XLADDP_DISTRIBUTED_DEBUG=")
	// A session directory of its own: concurrent mpiruns (go test -p 4)
	// making /tmp/ompi.HOST.UID at once fail with "File exists". Short,
	// for the sockets in it.
	session, err := os.MkdirTemp("", "ompi")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(session) })
	cmd.Env = append(cmd.Env, "OMPI_MCA_orte_tmpdir_base="+session)
	cmd.Env = append(cmd.Env, env...)
	out := &Output{}
	cmd.Stdout, cmd.Stderr = out, out
	start := time.Now()
	require.NoError(t, cmd.Start())
	if started != nil {
		started(dir)
	}
	err = cmd.Wait()
	res := MPIResult{Output: out.String(), Err: err, Elapsed: time.Since(start), Reps: make([]*Report, np)}
	for r := range np {
		if b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("rank-%d.json", r))); err == nil {
			res.Reps[r] = &Report{}
			require.NoError(t, json.Unmarshal(b, res.Reps[r]))
		}
	}
	return res
}

// RequireClean requires the job to succeed with every rank reporting no
// error and no failed check.
func RequireClean(t *testing.T, res MPIResult) {
	t.Helper()
	require.NoError(t, res.Err, "%s", res.Output)
	for r, rep := range res.Reps {
		require.NotNil(t, rep, "rank %d wrote no report: %s", r, res.Output)
		assert.Empty(t, rep.Error, "rank %d", r)
		assert.Empty(t, rep.Failures, "rank %d", r)
	}
}
