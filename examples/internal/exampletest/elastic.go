package exampletest

import (
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
	port, err := freeport.Pick("127.0.0.1")
	require.NoError(t, err)
	job := Job{Name: name, Args: args, Launch: []string{"--nnodes=1:2", "--nproc_per_node=1", "--rdzv_backend=c10d",
		"--rdzv_endpoint=127.0.0.1:" + strconv.Itoa(port), "--rdzv_id=lose-a-node", "--max_restarts=1",
		"--rdzv_conf=last_call_timeout=2"}}
	node := func() *Running { return job.start(t, []string{"--checkpoint-dir", ckdir}) }
	// Node 0 hosts the c10d store: it binds the endpoint before node 1
	// starts. (The endpoint's host must outlive the job, as torchrun's.)
	first := node()
	require.Eventually(t, func() bool {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), 100*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, time.Minute, 20*time.Millisecond, "node 0 never listened at the endpoint: %s", first.Output())
	second := node()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
	at := steps[rng.IntN(len(steps))]
	want := filepath.Join(ckdir, "step-"+strings.Repeat("0", 12-len(strconv.Itoa(at)))+strconv.Itoa(at)+".safetensors")
	require.Eventually(t, func() bool { _, err := os.Stat(want); return err == nil }, 2*time.Minute, 20*time.Millisecond,
		"no %s: node 0:\n%s\nnode 1:\n%s", want, first.Output(), second.Output())
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
	assert.Contains(t, out, "resumed from "+ckdir)
	return out
}
