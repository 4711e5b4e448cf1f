package launch

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/ddp/internal/flight"
	"github.com/xladdp/xladdp/ddp/internal/procset"
	"github.com/xladdp/xladdp/internal/procfs"
)

// TestStoppedRankIsPlacedWithoutContradiction: a rank stopped with no
// fresh record is said "not finished" only where the others wait in
// their last collective; where they finished it (a stopped compiler the
// others wait on outside the collectives) it is said past it, and the
// others are said in no collective, never "none is behind".
func TestStoppedRankIsPlacedWithoutContradiction(t *testing.T) {
	set := newWorkerSet(3)
	for rank := range 3 {
		p := procset.NewProcess(exec.Command("sleep", "60"), rank, rank)
		require.NoError(t, set.Start(p, io.Discard, io.Discard))
	}
	t.Cleanup(func() { set.Stop(time.Second) })
	pid := set.Processes[1].Cmd.Process.Pid
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	require.Eventually(t, func() bool { return procfs.Stopped(procfs.State("/proc", pid)) }, 5*time.Second, 10*time.Millisecond)
	stopped := "rank 1 is stopped (pid " + strconv.Itoa(pid) + "; kill -CONT " + strconv.Itoa(pid) + " resumes it)"

	at := func(rank int, state flight.State) flight.Dump {
		return flight.Dump{Rank: rank, Entries: []flight.Entry{
			{Op: flight.Op{Seq: 2, Name: "Broadcast", DType: "float32", Count: 4, Peer: 0}, State: state, Caller: "/src/train.go:9"}}}
	}
	for _, tc := range []struct {
		name  string
		dumps []flight.Dump
		want  string
	}{
		{"the others wait in it", []flight.Dump{at(0, flight.Started), at(2, flight.Started)},
			stopped + " and has not finished Broadcast #2; ranks 0,2 wait in Broadcast #2 at train.go:9"},
		{"the others finished it", []flight.Dump{at(0, flight.Done), at(2, flight.Done)},
			stopped + " after Broadcast #2, which the others finished; ranks 0,2 finished Broadcast #2 and are in no collective"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := set.diagnose(tc.dumps, nil, t.TempDir(), []int{0, 1, 2})
			assert.Equal(t, tc.want, got)
			assert.NotContains(t, got, "none is behind")
		})
	}
}

// TestFlightDirsDoNotPileUp: each new temporary flight directory leaves
// at most keptFlightDirs of ddprun's own in $TMPDIR, the newest; other
// files and directories there are left alone.
func TestFlightDirsDoNotPileUp(t *testing.T) {
	tmp := t.TempDir()
	other := filepath.Join(tmp, "someone-else")
	require.NoError(t, os.Mkdir(other, 0o755))
	file := filepath.Join(tmp, flightDirPrefix+"a-file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	var made []string
	for i := range 12 {
		dir, owned, err := flightDir([]string{"TMPDIR=" + tmp}, 0)
		require.NoError(t, err)
		require.True(t, owned)
		old := time.Now().Add(time.Duration(i-20) * time.Minute)
		require.NoError(t, os.Chtimes(dir, old, old))
		made = append(made, dir)
	}
	left, err := filepath.Glob(filepath.Join(tmp, flightDirPrefix+"*"))
	require.NoError(t, err)
	assert.Len(t, left, keptFlightDirs+1, "the newest dirs and the file")
	for _, dir := range made[len(made)-keptFlightDirs:] {
		assert.DirExists(t, dir)
	}
	assert.NoDirExists(t, made[0])
	assert.DirExists(t, other)
	assert.FileExists(t, file)
}
