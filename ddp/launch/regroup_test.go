package launch

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWorkersRegroupInPlace: a node's workers that committed after a
// peer's loss and wait for their place (the regroup scenario, as ddp.Run
// does) get it in the next round, in the same processes (its rank,
// round and flight directory), and the job goes on; under
// --restart_on_peer_loss they exit with their commit and new ones start;
// with no restart left they are stopped while they wait and ddprun exits
// 75; a worker that fails once placed is a failure like any other, and
// the next restart starts new workers. No regroup directory, process or
// shared-memory segment is left.
func TestWorkersRegroupInPlace(t *testing.T) {
	cases := []struct {
		name, scenario string
		args           []string
		code           int
		says           []string
		kept           bool // the first round's processes are the ones placed
	}{
		{"in place", "regroup", []string{"--max_restarts=1"}, 0,
			[]string{"going on from it in the same processes, regrouped without the lost node (restart 1 of 1)"}, true},
		{"restarted", "regroup", []string{"--max_restarts=1", "--restart_on_peer_loss"}, 0,
			[]string{"restarting from it (restart 1 of 1)"}, false},
		{"no restart left", "regroup", []string{"--max_restarts=0"}, 75,
			[]string{"no restart left (--max_restarts=0)", "no place:"}, false},
		{"fails once placed", "regroup-then-fail", []string{"--max_restarts=2"}, 0,
			[]string{"(restart 1 of 2)", "exit code 1", "(restart 2 of 2)"}, true},
	}
	started := regexp.MustCompile(`started pid (\d+) as rank \d+ in round (\d+)`)
	placed := regexp.MustCompile(`pid (\d+) placed as rank`)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mark := "regroup-" + strconv.FormatInt(time.Now().UnixNano(), 36)
			_, before := leftovers(t, mark)
			res := runAgent(t.Context(), t, mark, c.scenario, append([]string{"--nproc_per_node=2", "--monitor_interval=0.05"}, c.args...))
			out := res.stdout + res.stderr
			assert.Equal(t, c.code, res.code, "%s", out)
			for _, s := range c.says {
				assert.Contains(t, out, s)
			}
			var first, later, got []string
			for _, m := range started.FindAllStringSubmatch(res.stdout, -1) {
				if m[2] == "0" {
					first = append(first, m[1])
				} else {
					later = append(later, m[1])
				}
			}
			for _, m := range placed.FindAllStringSubmatch(res.stdout, -1) {
				got = append(got, m[1])
			}
			slices.Sort(first)
			slices.Sort(got)
			assert.Len(t, first, 2, "%s", out)
			if c.kept {
				assert.Equal(t, first, got, "the first round's workers are placed: %s", out)
				assert.Contains(t, res.stdout, "placed: TORCHELASTIC_RESTART_COUNT=1")
				assert.Regexp(t, `placed: XLADDP_FLIGHT_DIR=\S+`, res.stdout)
			} else {
				assert.Empty(t, got, "no worker was placed: %s", out)
			}
			if c.code == 0 && !c.kept {
				assert.Len(t, later, 2, "new workers ran the next round: %s", out)
			}
			dirs, _ := filepath.Glob(filepath.Join(res.tmp, "ddprun-regroup-*"))
			assert.Empty(t, dirs, "the regroup directory is removed")
			assertNothingLeft(t, mark, before)
		})
	}
}

// TestRegroupDirsOfGoneAgentsArePruned: a ddprun killed with kill -9
// leaves its regroup directory; the next one in the same $TMPDIR removes
// it, and leaves a running agent's, a directory of another name, and a
// file of the prefix.
func TestRegroupDirsOfGoneAgentsArePruned(t *testing.T) {
	parent := t.TempDir()
	gone := exec.Command("true")
	require.NoError(t, gone.Run())
	dead := filepath.Join(parent, fmt.Sprintf("%s%d-123", regroupDirPrefix, gone.Process.Pid))
	live := filepath.Join(parent, fmt.Sprintf("%s%d-456", regroupDirPrefix, os.Getpid()))
	other := filepath.Join(parent, regroupDirPrefix+"x-1")
	file := filepath.Join(parent, fmt.Sprintf("%s%d-789", regroupDirPrefix, gone.Process.Pid))
	for _, d := range []string{dead, live, other} {
		require.NoError(t, os.Mkdir(d, 0o700))
	}
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	dir, err := regroupDir(Config{}, []string{"TMPDIR=" + parent})
	require.NoError(t, err)
	assert.NoDirExists(t, dead, "a gone ddprun's")
	for _, kept := range []string{live, other, dir} {
		assert.DirExists(t, kept)
	}
	assert.FileExists(t, file)
	assert.Contains(t, filepath.Base(dir), fmt.Sprintf("%s%d-", regroupDirPrefix, os.Getpid()))
}
