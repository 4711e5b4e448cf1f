package launch

import (
	"bytes"
	"context"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBackendFlag: --backend, else $XLADDP_BACKEND (or PET_BACKEND),
// else tcp; anything else is refused.
func TestBackendFlag(t *testing.T) {
	for _, tc := range []struct {
		args          []string
		env           map[string]string
		want, wantErr string
	}{
		{want: "tcp"},
		{args: []string{"--backend=MPI"}, want: "mpi"},
		{env: map[string]string{"XLADDP_BACKEND": "mpi"}, want: "mpi"},
		{args: []string{"--backend", "tcp"}, env: map[string]string{"XLADDP_BACKEND": "mpi"}, want: "tcp"},
		{env: map[string]string{"PET_BACKEND": "mpi"}, want: "mpi"},
		{args: []string{"--backend=nccl"}, wantErr: `--backend="nccl": want tcp (the default) or mpi`},
		{env: map[string]string{"XLADDP_BACKEND": "gloo"}, wantErr: `--backend="gloo"`},
	} {
		c, err := ParseArgs(append(tc.args, "./train"), envOf(tc.env), io.Discard)
		if tc.wantErr != "" {
			assert.ErrorContains(t, err, tc.wantErr, "%v %v", tc.args, tc.env)
			continue
		}
		require.NoError(t, err, "%v %v", tc.args, tc.env)
		assert.Equal(t, tc.want, c.Transport, "%v %v", tc.args, tc.env)
	}
}

// TestMPIBackendRefusals: what ddprun cannot do under mpirun is refused
// with what to do instead, before anything starts.
func TestMPIBackendRefusals(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--nnodes=2", "--node_rank=0", "--master_addr=127.0.0.1"}, "a job across nodes is started by mpirun itself"},
		{[]string{"--nnodes=1:2"}, "a job across nodes is started by mpirun itself"},
		{[]string{"--log_dir=/tmp/x", "--tee=3"}, "--log_dir, --redirects, --tee and --local_ranks_filter are not available"},
	} {
		c, err := ParseArgs(append(append(tc.args, "--backend=mpi", "--nproc_per_node=2"), "./train"), noEnv, io.Discard)
		require.NoError(t, err, "%v", tc.args)
		var out, errb bytes.Buffer
		assert.Equal(t, 1, Run(context.Background(), c, nil, &out, &errb), "%v", tc.args)
		assert.Contains(t, errb.String(), tc.want, "%v", tc.args)
	}
}

// TestMPIDryRun shows the mpirun command and what the workers' environment
// gains; the per-rank variables of an enclosing job are dropped (MPI gives
// the ranks).
func TestMPIDryRun(t *testing.T) {
	c, err := ParseArgs([]string{"--backend=mpi", "--nproc_per_node=3", "--dry_run", "./train", "--lr", "1"}, noEnv, io.Discard)
	require.NoError(t, err)
	var out bytes.Buffer
	DryRun(&out, c, nil)
	s := out.String()
	assert.Contains(t, s, `"mpirun" "-np" "3" "--oversubscribe" "--bind-to" "none"`)
	assert.Contains(t, s, `"--mca" "odls_base_sigkill_timeout" "2"`, "a failed job's ranks get 2 s to dump")
	assert.Contains(t, s, `"./train" "--lr" "1"]`)
	assert.Contains(t, s, "XLADDP_BACKEND=mpi")
	assert.Contains(t, s, "OMP_NUM_THREADS=1")

	args, _ := mpirunCommand(c, []string{"OMPI_MCA_odls_base_sigkill_timeout=9"}, 0)
	assert.NotContains(t, args, "odls_base_sigkill_timeout", "the user's own setting stays")

	_, added := mpirunCommand(c, nil, 2)
	env := mpirunEnv([]string{"RANK=5", "WORLD_SIZE=9", "LOCAL_RANK=1", "XLADDP_BACKEND=tcp", "HOME=/root", "PATH=/bin"}, added)
	assert.Subset(t, env, []string{"HOME=/root", "PATH=/bin", "XLADDP_BACKEND=mpi", "TORCHELASTIC_RESTART_COUNT=2"})
	for _, kv := range env {
		assert.False(t, slices.Contains([]string{"RANK=5", "WORLD_SIZE=9", "LOCAL_RANK=1", "XLADDP_BACKEND=tcp"}, kv), kv)
	}
}

// TestLongHungLauncherIsStopped: a parent whose children have all ended
// but which never exits (as Open MPI 4.1's mpirun sometimes does after a
// failed job) is noticed after mpirunOrphanGrace (which it waits out:
// make test-long); one whose child still runs is not.
func TestLongHungLauncherIsStopped(t *testing.T) {
	t.Parallel() // waiting on sleeps of its own
	start := func(script string) *exec.Cmd {
		cmd := exec.Command("sh", "-c", script)
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	// sleep 0.1 exits and is never reaped: exec'd sleep is its parent now.
	hung := start("sleep 0.1 & exec sleep 60")
	busy := start("sleep 60 & exec sleep 60")
	watch := func(pid int) chan struct{} {
		done, orphaned := make(chan struct{}), make(chan struct{})
		t.Cleanup(func() { close(done) })
		go watchWorkersOf(pid, done, orphaned)
		return orphaned
	}
	hungSeen, busySeen := watch(hung.Process.Pid), watch(busy.Process.Pid)
	began := time.Now()
	select {
	case <-hungSeen:
		assert.GreaterOrEqual(t, time.Since(began), mpirunOrphanGrace)
	case <-time.After(mpirunOrphanGrace + 5*time.Second):
		t.Fatal("a parent of only ended children was not noticed")
	}
	select {
	case <-busySeen:
		t.Fatal("a parent with a running child was taken for hung")
	default:
	}
	live, ended := childrenOf(hung.Process.Pid)
	assert.Empty(t, live)
	assert.Equal(t, 1, ended)
	live, ended = childrenOf(busy.Process.Pid)
	assert.Len(t, live, 1, "the running child is listed")
	assert.Zero(t, ended)
}

// TestMPITagsBecomeRankPrefixes: mpirun --tag-output's "[JOB,RANK]<stdout>:"
// becomes "[rankRANK]:"; mpirun's own lines, and lines that only look
// tagged, pass unchanged.
func TestMPITagsBecomeRankPrefixes(t *testing.T) {
	cases := map[string]string{
		"[1,0]<stdout>:sum 3\n":         "[rank0]:sum 3\n",
		"[12345,17]<stderr>:oops\n":     "[rank17]:oops\n",
		"[1,2]<stdout>:\n":              "[rank2]:\n",
		"[1,2]<stdout>:a>:b\n":          "[rank2]:a>:b\n",
		"mpirun noticed that ...\n":     "mpirun noticed that ...\n",
		"[x,y]<stdout>:not a rank\n":    "[x,y]<stdout>:not a rank\n",
		"[1,]<stdout>:empty\n":          "[1,]<stdout>:empty\n",
		"[warn] something>: happened\n": "[warn] something>: happened\n",
	}
	for in, want := range cases {
		var out bytes.Buffer
		n, err := (&mpiTagWriter{w: &out}).Write([]byte(in))
		require.NoError(t, err)
		assert.Equal(t, len(in), n)
		assert.Equal(t, want, out.String(), in)
	}
}

// TestMPIChunksBecomeWholeLines: mpirun cuts a long line into tagged
// chunks with no newline between them, and another rank's chunk may come
// between two of them; each rank's line comes out whole, once, and a line
// a rank left unfinished comes out at the end. A rank that never ends its
// line is cut at maxPendingLine, not held without bound.
func TestMPIChunksBecomeWholeLines(t *testing.T) {
	var out bytes.Buffer
	w := &mpiTagWriter{w: &out}
	for _, in := range []string{ // as copyLines writes them: whole lines
		"[1,0]<stdout>:PARAMS 0.1 0.2[1,0]<stdout>: 0.3 0.4\n",
		"[1,0]<stdout>:first half [1,1]<stdout>:rank one whole\n",
		"[1,0]<stdout>:second half\n",
		"[1,2]<stdout>:never ended [1,0]<stdout>:zero's last\n",
	} {
		n, err := w.Write([]byte(in))
		require.NoError(t, err)
		assert.Equal(t, len(in), n)
	}
	require.NoError(t, w.flush())
	assert.Equal(t, "[rank0]:PARAMS 0.1 0.2 0.3 0.4\n"+
		"[rank1]:rank one whole\n"+
		"[rank0]:first half second half\n"+
		"[rank0]:zero's last\n"+
		"[rank2]:never ended \n", out.String())

	out.Reset()
	chunk := "[1,3]<stdout>:" + strings.Repeat("x", 4096)
	for range maxPendingLine/4096 + 2 {
		_, err := w.Write([]byte(chunk + chunk))
		require.NoError(t, err)
	}
	assert.LessOrEqual(t, len(w.pending["3"]), maxPendingLine)
	assert.Contains(t, out.String(), "[rank3]:xxxx", "a line past the bound is written")
}
