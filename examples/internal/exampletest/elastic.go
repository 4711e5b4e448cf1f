package exampletest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/internal/freeport"
)

// LoseANode runs example name with args (and --checkpoint-dir) as an
// elastic job of nodes nodes on loopback: a ddprun each,
// --nnodes=nodes-1:nodes, a c10d rendezvous hosted by node 0, one
// process a node, --max_restarts=1. At a random moment (Running.Await on
// node 0's marks) it kills a random other node (its ddprun and worker,
// kill -9). The survivors must commit the last step they completed, name
// the lost node, go on without it from that step (ZeroStepsLost) in the
// same processes (their workers regroup in place) and finish. It returns
// the survivors' outputs, node 0's first.
func LoseANode(t *testing.T, name string, args []string, nodes int, marks []string) string {
	t.Helper()
	job, endpoint := elasticJob(t, "127.0.0.1", name, args, "lose-a-node", fmt.Sprintf("--nnodes=%d:%d", nodes-1, nodes), "--max_restarts=1")
	return loseANode(t, job, endpoint, nodes, marks, onLoopback)
}

// LoseANodeRestarting is LoseANode under ddprun --restart_on_peer_loss:
// the survivors' workers exit with their commit and ddprun restarts
// them.
func LoseANodeRestarting(t *testing.T, name string, args []string, nodes int, marks []string) string {
	t.Helper()
	job, endpoint := elasticJob(t, "127.0.0.1", name, args, "lose-a-node", fmt.Sprintf("--nnodes=%d:%d", nodes-1, nodes), "--max_restarts=1")
	job.Launch = append(job.Launch, "--restart_on_peer_loss")
	return loseANode(t, job, endpoint, nodes, marks, onLoopback)
}

// LoseANodeOfHosts is LoseANode with each node on a host of its own: a
// network namespace with its own address (root only; it skips
// otherwise).
func LoseANodeOfHosts(t *testing.T, name string, args []string, nodes int, marks []string) string {
	t.Helper()
	h := NewNamespaceHosts(t, nodes)
	job, endpoint := elasticJob(t, h.Addrs[0], name, args, "lose-a-host", fmt.Sprintf("--nnodes=%d:%d", nodes-1, nodes), "--max_restarts=1")
	return loseANode(t, job, endpoint, nodes, marks, h.place)
}

// loseANode is LoseANode's trial of job, its node i's command placed by
// on.
func loseANode(t *testing.T, job Job, endpoint string, nodes int, marks []string, on func(i int, cmd *exec.Cmd) *exec.Cmd) string {
	t.Helper()
	all, ckdir := startNodes(t, job, endpoint, nodes, on)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
	moment := all[0].Await(t, marks, rng)
	lost := 1 + rng.IntN(nodes-1)
	victim := all[lost]
	var survivors []int
	for i, n := range all {
		if i != lost {
			survivors = append(survivors, n.Workers()...)
		}
	}
	for _, pid := range victim.Workers() {
		require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	}
	require.NoError(t, victim.cmd.Process.Kill())
	_, _ = victim.Wait()
	var out string
	for i, n := range all {
		if i != lost {
			// The restarted round ranks its nodes by arrival: rank 0 may
			// print on any survivor.
			o, err := n.Wait()
			require.NoError(t, err, "%s", outputs(all))
			out += o
		}
	}
	t.Logf("the node started %d of %d killed %s: %s", lost+1, nodes, moment, LineWith(out, "(restart 1 of 1)"))
	if slices.Contains(job.Launch, "--restart_on_peer_loss") {
		assert.Contains(t, out, "restarting from it (restart 1 of 1)", "%s", outputs(all))
	} else {
		assert.Contains(t, out, "going on from it in the same processes, regrouped without the lost node (restart 1 of 1)", "%s", outputs(all))
		for _, pid := range survivors {
			assert.Contains(t, out, fmt.Sprintf("process %d goes on as rank", pid), "survivor %d regrouped in place", pid)
		}
	}
	assert.Regexp(t, `node \d was lost: its agent, \S+ \(pid \d+, agent [0-9a-f]+\), beat no heartbeat`, out, "the lost node named")
	ZeroStepsLost(t, out, ckdir)
	return out
}

// startNodes starts job's nodes nodes, node 0 first (the store's host,
// listening at endpoint), node i's command placed by on, all with one
// --checkpoint-dir, which it returns.
func startNodes(t *testing.T, job Job, endpoint string, nodes int, on func(i int, cmd *exec.Cmd) *exec.Cmd) ([]*Running, string) {
	t.Helper()
	ckdir := filepath.Join(t.TempDir(), "ck")
	var all []*Running
	node := func() *Running {
		return Start(t, on(len(all), job.command(t, "--checkpoint-dir", ckdir)))
	}
	all = append(all, startStoreHost(t, endpoint, node))
	for range nodes - 1 {
		all = append(all, node())
	}
	return all, ckdir
}

// completedStep and resumedStep read a survivor's word on the step it
// committed after a peer's loss, and the resumed job's.
var (
	completedStep = regexp.MustCompile(`after step (\d+), the last this replica completed`)
	resumedStep   = regexp.MustCompile(`resumed from \S+ at step (\d+)`)
)

// ZeroStepsLost checks that out, a job that lost a peer and restarted
// from ckdir, resumed at the last step any survivor completed: no
// completed step was redone.
func ZeroStepsLost(t *testing.T, out, ckdir string) {
	t.Helper()
	last := -1
	for _, m := range completedStep.FindAllStringSubmatch(out, -1) {
		step, _ := strconv.Atoi(m[1])
		last = max(last, step)
	}
	require.GreaterOrEqual(t, last, 0, "no survivor said which step it committed: %s", out)
	m := resumedStep.FindStringSubmatch(out)
	require.NotNil(t, m, "the job did not resume: %s", out)
	assert.Contains(t, m[0], "resumed from "+ckdir)
	resumed, _ := strconv.Atoi(m[1])
	assert.Equal(t, last, resumed, "the job resumed at step %d, where the survivors completed step %d", resumed, last)
	t.Logf("resumed at step %d, the last completed: 0 steps redone", resumed)
}

// elasticJob is name with args under ddprun with nnodes (--nnodes=MIN:MAX)
// and restarts (--max_restarts=N), a c10d rendezvous at host (loopback: a
// free port) for endpoint, one process a node.
func elasticJob(t *testing.T, host, name string, args []string, id string, nnodes, restarts string) (job Job, endpoint string) {
	t.Helper()
	port := 29514 // a namespace host is new: nothing else listens there
	if host == "127.0.0.1" {
		var err error
		port, err = freeport.Pick(host)
		require.NoError(t, err)
	}
	endpoint = host + ":" + strconv.Itoa(port)
	return Job{Name: name, Args: args, Launch: []string{nnodes, "--nproc_per_node=1", "--rdzv_backend=c10d",
		"--rdzv_endpoint=" + endpoint, "--rdzv_id=" + id, restarts, "--rdzv_conf=last_call_timeout=2"}}, endpoint
}

// startStoreHost starts node 0 and waits until it listens at the c10d
// endpoint, so that it hosts the store (the endpoint's host must outlive
// the job, as torchrun's).
func startStoreHost(t *testing.T, endpoint string, node func() *Running) *Running {
	t.Helper()
	first := node()
	require.Eventually(t, func() bool {
		c, err := net.DialTimeout("tcp", endpoint, 100*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, time.Minute, 20*time.Millisecond, "node 0 never listened at the endpoint: %s", first.Output())
	return first
}

func outputs(nodes []*Running) string {
	var b strings.Builder
	for i, n := range nodes {
		fmt.Fprintf(&b, "\nnode %d:\n%s", i, n.Output())
	}
	return b.String()
}

// StopAWorker runs example name with args as LoseANode's job, with
// ddprun --timeout=15 --stall_warn=5, and at a random moment SIGSTOPs the
// worker of a random node other than the store's (its agent lives on).
// Its agent must name it as stopped, the others' collective must time
// out, the survivors commit the last step they completed and go on, the
// stopped worker's agent stops it and starts another, and the job must
// finish on every node, resuming at that step (ZeroStepsLost). It
// returns every node's output, node 0's first.
func StopAWorker(t *testing.T, name string, args []string, nodes int, marks []string) string {
	t.Helper()
	job, endpoint := elasticJob(t, "127.0.0.1", name, args, "stop-a-worker", fmt.Sprintf("--nnodes=%d:%d", nodes-1, nodes), "--max_restarts=1")
	job.Launch = append(job.Launch, "--timeout=15", "--stall_warn=5")
	all, ckdir := startNodes(t, job, endpoint, nodes, onLoopback)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
	moment := all[0].Await(t, marks, rng)
	stopped := all[1+rng.IntN(nodes-1)]
	pids := stopped.Workers()
	require.NotEmpty(t, pids, "%s", outputs(all))
	for _, pid := range pids {
		require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	}
	var out string
	for _, n := range all {
		o, err := n.Wait()
		require.NoError(t, err, "%s", outputs(all))
		out += o
	}
	t.Logf("worker %v stopped %s: %s", pids, moment, LineWith(out, "timed out"))
	assert.Contains(t, out, fmt.Sprintf("is stopped (pid %d;", pids[0]), "its agent named it")
	assert.Contains(t, out, "timed out", "the others' collective timed out")
	ZeroStepsLost(t, out, ckdir)
	return out
}
