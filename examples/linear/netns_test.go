package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/examples/internal/exampletest"
	"github.com/xladdp/xladdp/internal/workerenv"
	"github.com/xladdp/xladdp/xla"
)

// TestLongPreemptedAcrossTwoNamespaceHosts: a job over two hosts (network
// namespaces with addresses of their own, a ddprun on each, one rank per
// host, the checkpoint directory shared as on FSx) gets its Spot notice on
// one host only (either, the store's or the other), at a random epoch: the ranks agree on it, both ddpruns exit
// 75, and the same two commands again resume and end with the weights of
// the same job never stopped, bit for bit.
func TestLongPreemptedAcrossTwoNamespaceHosts(t *testing.T) {
	h := exampletest.NewNamespaceHosts(t, 2)
	exampletest.CleanEnv(t)
	ddprun, cache := exampletest.Ddprun(t), t.TempDir()
	const port = "29511" // host 0's namespace is new: nothing else listens there
	job := func(node int, ckdir, final string) *exec.Cmd {
		argv := append([]string{ddprun, "--nnodes=2", "--node_rank=" + strconv.Itoa(node), "--nproc_per_node=1",
			"--master_addr=" + h.Addrs[0], "--master_port=" + port}, exampletest.Self()...)
		cmd := h.Command(node, argv...)
		cmd.Env = append(append(os.Environ(), exampletest.Env("linear", "--epochs", "400", "--checkpoint-every", "5",
			"--checkpoint-dir", ckdir, "--checkpoint", final)...), xla.EnvCacheDir+"="+cache)
		return cmd
	}
	both := func(ckdir, final string) [2]*exampletest.Running {
		return [2]*exampletest.Running{exampletest.Start(t, job(0, ckdir, final)), exampletest.Start(t, job(1, ckdir, final))}
	}

	dir := t.TempDir()
	whole := filepath.Join(dir, "whole.safetensors")
	for _, r := range both(filepath.Join(dir, "whole-ck"), whole) {
		out, err := r.Wait()
		require.NoError(t, err, "%s", out)
	}
	want := exampletest.ModelTensors(t, whole)

	ckdir, final := filepath.Join(dir, "ck"), filepath.Join(dir, "final.safetensors")
	nodes := both(ckdir, final)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
	moment := nodes[0].Await(t, exampletest.Marks("epoch %d:", 10, 30, 60, 100, 150, 200), rng)
	noticed := rng.IntN(2)
	moment = fmt.Sprintf("to host %d %s", noticed, moment)
	outs := [2]string{}
	var errs [2]error
	outs[noticed], errs[noticed] = nodes[noticed].Signal(t, syscall.SIGTERM)
	outs[1-noticed], errs[1-noticed] = nodes[1-noticed].Wait()
	for i, err := range errs {
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, "host %d: %s", i, outs[i])
		assert.Equal(t, workerenv.ExitPreempted, exit.ExitCode(), "host %d, SIGTERM %s: %s", i, moment, outs[i])
	}
	t.Logf("SIGTERM %s", moment)
	for i, r := range both(ckdir, final) {
		out, err := r.Wait()
		require.NoError(t, err, "host %d: %s", i, out)
		if i == 0 {
			assert.Contains(t, out, "resumed from "+ckdir)
		}
	}
	assert.Equal(t, want, exampletest.ModelTensors(t, final), "SIGTERM %s", moment)
}
