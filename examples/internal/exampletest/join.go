package exampletest

import (
	"fmt"
	"math/rand/v2"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// JoinANode runs example name with args (and --checkpoint-dir) as an
// elastic job on loopback of nodes-1 nodes that may grow to nodes
// (--nnodes=nodes-1:nodes, a c10d rendezvous hosted by node 0, one
// process a node, --max_restarts=1); at a random moment (Running.Await
// on node 0's marks) one more node starts. The job's workers must hold
// the step they all completed, regroup in place with the new node (their
// pids kept), whose worker heals from a live peer's memory (no file
// read; a sharded optimizer's step is committed as a sharded checkpoint
// instead, which the new node reads), and the job must resume at the held
// step and finish on every node. It returns every node's output, node 0's
// first.
func JoinANode(t *testing.T, name string, args []string, nodes int, marks []string) string {
	t.Helper()
	job, endpoint := growingJob(t, "127.0.0.1", name, args, nodes)
	return joinANode(t, job, endpoint, nodes, marks, false, onLoopback)
}

// JoinANodeAndLoseOne is JoinANode where, as the job's workers regroup
// with the new node (0 to 0.4 s after its agent said they hold the step),
// another node of the job (not the store's; nodes ≥ 3) loses its ddprun
// and worker (kill -9) while the new one heals: the
// survivors commit the step they held, and the job goes on from it
// without the lost node (0 steps redone).
func JoinANodeAndLoseOne(t *testing.T, name string, args []string, nodes int, marks []string) string {
	t.Helper()
	require.GreaterOrEqual(t, nodes, 3, "a node to lose beside the store's and the new one")
	job, endpoint := growingJob(t, "127.0.0.1", name, args, nodes)
	return joinANode(t, job, endpoint, nodes, marks, true, onLoopback)
}

// JoinANodeOfHosts is JoinANode with each node on a host of its own: a
// network namespace with its own address (root only; it skips
// otherwise).
func JoinANodeOfHosts(t *testing.T, name string, args []string, nodes int, marks []string) string {
	t.Helper()
	h := NewNamespaceHosts(t, nodes)
	job, endpoint := growingJob(t, h.Addrs[0], name, args, nodes)
	return joinANode(t, job, endpoint, nodes, marks, false, h.place)
}

// JoinANodeAndLoseOneOfHosts is JoinANodeAndLoseOne with each node on a
// host of its own (see JoinANodeOfHosts).
func JoinANodeAndLoseOneOfHosts(t *testing.T, name string, args []string, nodes int, marks []string) string {
	t.Helper()
	require.GreaterOrEqual(t, nodes, 3, "a node to lose beside the store's and the new one")
	h := NewNamespaceHosts(t, nodes)
	job, endpoint := growingJob(t, h.Addrs[0], name, args, nodes)
	return joinANode(t, job, endpoint, nodes, marks, true, h.place)
}

// growingJob is name with args as an elastic job of nodes-1 nodes that
// may grow to nodes, its c10d rendezvous at host.
func growingJob(t *testing.T, host, name string, args []string, nodes int) (Job, string) {
	t.Helper()
	return elasticJob(t, host, name, args, "join-a-node", fmt.Sprintf("--nnodes=%d:%d", nodes-1, nodes), "--max_restarts=1")
}

// onLoopback places node i's command on this host, as it is.
func onLoopback(_ int, cmd *exec.Cmd) *exec.Cmd { return cmd }

var (
	heldStep   = regexp.MustCompile(`held step (\d+) in (this process's memory|\S+)`)
	healedStep = regexp.MustCompile(`healed from rank \d+'s memory, a live peer \([^)]*\): step (\d+), no file read`)
	resumedAny = regexp.MustCompile(`resumed from (.+?) at step (\d+)`)
)

// joinANode is JoinANode's trial of job, with a node lost while the new
// one heals when lose, node i's command placed by on.
func joinANode(t *testing.T, job Job, endpoint string, nodes int, marks []string, lose bool, on func(i int, cmd *exec.Cmd) *exec.Cmd) string {
	t.Helper()
	all, ckdir := startNodes(t, job, endpoint, nodes-1, on)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
	moment := all[0].Await(t, marks, rng)
	pids := make([][]int, len(all))
	for i, n := range all {
		pids[i] = n.Workers()
	}
	all = append(all, Start(t, on(nodes-1, job.command(t, "--checkpoint-dir", ckdir))))
	lost := -1
	if lose {
		lost = 1 + rng.IntN(nodes-2)
		victim := all[lost]
		// From the agents' word that the workers hold the step to a
		// moment of the regroup, the new round or the heal.
		select {
		case <-waitFor(victim.ctx, all[0].out, "waiting to join: every worker holds"):
		case <-waitFor(victim.ctx, victim.out, "waiting to join: every worker holds"):
		case <-victim.ctx.Done():
			require.Fail(t, "the job's workers did not hold a step for the new node", "%s", outputs(all))
		}
		time.Sleep(time.Duration(rng.IntN(400)) * time.Millisecond)
		for _, pid := range victim.Workers() {
			require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
		}
		require.NoError(t, victim.cmd.Process.Kill())
		_, _ = victim.Wait()
	}
	out := ""
	for i, n := range all {
		if i != lost {
			o, err := n.Wait()
			require.NoError(t, err, "%s", outputs(all))
			out += o
		}
	}
	assert.Contains(t, all[nodes-1].Output(), "waiting to join at its next membership change")
	assert.Contains(t, out, "going on with them in the same processes, the new workers ", "%s", outputs(all))
	for i, node := range pids {
		if i == lost {
			continue // killed, maybe before it regrouped
		}
		for _, pid := range node {
			assert.Contains(t, all[i].Output(), fmt.Sprintf("process %d goes on as rank", pid), "node %d's worker %d regrouped in place", i, pid)
		}
	}
	t.Logf("node %d of %d joined %s", nodes, nodes, moment)
	checkJoined(t, out, all[nodes-1].Output(), ckdir, nodes, lose)
	return out
}

// checkJoined checks how the job went on once node nodes-1 (its output
// joined) joined: from the held step, healed from a live peer (a
// sharded optimizer's: from its checkpoint), or, when a node was lost as
// the new one healed, from the step the survivors committed.
func checkJoined(t *testing.T, out, joined, ckdir string, nodes int, lose bool) {
	t.Helper()
	held := stepOf(t, heldStep, out, "the step the workers held")
	t.Logf("the job held step %d", held)
	switch {
	case lose:
		t.Logf("a node was lost as the new one healed: %s", LineWith(out, "(restart 1 of 1)"))
		lastResumed(t, out, ckdir, max(held, lastCompleted(out)), true)
	case heldStep.FindStringSubmatch(out)[2] != "this process's memory":
		// A sharded optimizer's step is committed as a sharded
		// checkpoint, re-split at the new world size.
		lastResumed(t, out, ckdir, held, false)
	default:
		assert.Equal(t, held, stepOf(t, healedStep, joined, "the new node's heal"), "the new node healed at the held step")
		m := resumedAny.FindStringSubmatch(out)
		require.NotNil(t, m, "the job did not resume: %s", out)
		assert.Regexp(t, `^rank \d+'s memory, a live peer`, m[1], "resumed from a live peer, not a file")
		assert.Equal(t, strconv.Itoa(held), m[2], "resumed at the held step: 0 steps redone")
	}
	if m := grew.FindStringSubmatch(out); !lose {
		require.NotNil(t, m, "the resumed job says it grew: %s", out)
		was, now := atoi(t, m[1]), atoi(t, m[2])
		assert.Equal(t, now*(nodes-1), was*nodes, "%d replicas on %d nodes, then %d on %d", was, nodes-1, now, nodes)
	}
}

// grew is the resumed job's word on its replica counts.
var grew = regexp.MustCompile(`written by (\d+) replicas \(a global batch of \d+\), now (\d+) \(`)

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	require.NoError(t, err)
	return n
}

// stepOf is the step the first match of re in out names.
func stepOf(t *testing.T, re *regexp.Regexp, out, what string) int {
	t.Helper()
	m := re.FindStringSubmatch(out)
	require.NotNil(t, m, "no %s in the output: %s", what, out)
	n, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	return n
}

// lastCompleted is the last step a survivor of a peer's loss said it
// completed (-1: none said).
func lastCompleted(out string) int {
	last := -1
	for _, m := range completedStep.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[1])
		last = max(last, n)
	}
	return last
}

// lastResumed checks that the job's last resume was from ckdir at step
// want; with fromPeer, a heal from a live peer's memory passes too (a
// node lost before it met the new round: the others healed the new node
// without it).
func lastResumed(t *testing.T, out, ckdir string, want int, fromPeer bool) {
	t.Helper()
	all := resumedAny.FindAllStringSubmatch(out, -1)
	require.NotEmpty(t, all, "the job did not resume: %s", out)
	m := all[len(all)-1]
	if !fromPeer || !strings.HasPrefix(m[1], "rank ") {
		assert.Equal(t, ckdir, m[1], "the job resumed from the committed step in its directory")
	}
	assert.Equal(t, strconv.Itoa(want), m[2], "resumed at step %s, where the job had completed step %d", m[2], want)
	t.Logf("resumed at step %s, the last completed: 0 steps redone", m[2])
}
