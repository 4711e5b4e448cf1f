package exampletest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
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
// elastic job of two nodes on loopback: a ddprun each, --nnodes=1:2, a
// c10d rendezvous hosted by node 0, one process a node, --max_restarts=1.
// Once the job committed the checkpoint of one of steps (drawn at
// random), it kills node 1 (its ddprun and worker, kill -9); node 0 must
// restart alone from the last checkpoint, at world size 1, and finish. It
// returns node 0's output.
func LoseANode(t *testing.T, name string, args []string, steps []int) string {
	t.Helper()
	ckdir := filepath.Join(t.TempDir(), "ck")
	job, endpoint := elasticJob(t, name, args, "lose-a-node", "--max_restarts=1")
	node := func() *Running { return job.start(t, []string{"--checkpoint-dir", ckdir}) }
	first := startStoreHost(t, endpoint, node)
	second := node()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
	at := steps[rng.IntN(len(steps))]
	awaitCheckpoint(t, ckdir, at, first, second)
	time.Sleep(time.Duration(rng.IntN(200)) * time.Millisecond)
	for _, pid := range second.Workers() {
		require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	}
	require.NoError(t, second.cmd.Process.Kill())
	_, _ = second.Wait()
	out, err := first.Wait()
	require.NoError(t, err, "%s", out)
	t.Logf("node 1 killed after the checkpoint of step %d: %s", at, LineWith(out, "restarting"))
	assert.Contains(t, out, "restarting (restart 1 of 1)")
	assert.Regexp(t, `node 1 was lost: its agent, \S+ \(pid \d+, agent [0-9a-f]+\), beat no heartbeat in the .*; every worker was stopped; restarting`, out,
		"the lost node named, not the survivor's worker")
	assert.Contains(t, out, "resumed from "+ckdir)
	return out
}

// GainANode runs example name with args (and --checkpoint-dir) as an
// elastic job on loopback (--nnodes=1:2, a c10d rendezvous hosted by node
// 0, one process a node, --max_restarts=0) that starts on node 0 alone.
// Once the job committed the checkpoint of one of steps (drawn at
// random), node 1 starts: the job must restart to admit it (checkpointing
// on the way, a restart not counted against --max_restarts) and finish on
// both nodes. It returns node 0's output.
func GainANode(t *testing.T, name string, args []string, steps []int) string {
	t.Helper()
	ckdir := filepath.Join(t.TempDir(), "ck")
	job, endpoint := elasticJob(t, name, args, "gain-a-node", "--max_restarts=0")
	node := func() *Running { return job.start(t, []string{"--checkpoint-dir", ckdir}) }
	first := startStoreHost(t, endpoint, node)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
	at := steps[rng.IntN(len(steps))]
	awaitCheckpoint(t, ckdir, at, first)
	time.Sleep(time.Duration(rng.IntN(200)) * time.Millisecond)
	second := node()
	out, err := first.Wait()
	require.NoError(t, err, "%s", out)
	late, err := second.Wait()
	require.NoError(t, err, "%s", late)
	t.Logf("node 1 started after the checkpoint of step %d: %s", at, LineWith(out, "waiting to join"))
	assert.Contains(t, late, "waiting to join at its next restart")
	assert.Contains(t, out, "1 node(s) waiting to join")
	assert.Contains(t, out, "resumed from "+ckdir, "the job at two nodes goes on from the checkpoint")
	assert.Regexp(t, `written by 1 replicas \(a global batch of \d+\), now 2 \(`, out, "the job grew to two replicas")
	return out
}

// elasticJob is name with args under ddprun --nnodes=1:2 on loopback, a
// c10d rendezvous at a free port (endpoint), one process a node.
func elasticJob(t *testing.T, name string, args []string, id string, restarts string) (job Job, endpoint string) {
	t.Helper()
	port, err := freeport.Pick("127.0.0.1")
	require.NoError(t, err)
	endpoint = "127.0.0.1:" + strconv.Itoa(port)
	return Job{Name: name, Args: args, Launch: []string{"--nnodes=1:2", "--nproc_per_node=1", "--rdzv_backend=c10d",
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

// awaitCheckpoint waits for the checkpoint of step in ckdir.
func awaitCheckpoint(t *testing.T, ckdir string, step int, nodes ...*Running) {
	t.Helper()
	want := filepath.Join(ckdir, "step-"+strings.Repeat("0", 12-len(strconv.Itoa(step)))+strconv.Itoa(step)+".safetensors")
	require.Eventually(t, func() bool { _, err := os.Stat(want); return err == nil }, 2*time.Minute, 20*time.Millisecond,
		"no %s: %s", want, outputs(nodes))
}

func outputs(nodes []*Running) string {
	var b strings.Builder
	for i, n := range nodes {
		fmt.Fprintf(&b, "\nnode %d:\n%s", i, n.Output())
	}
	return b.String()
}
