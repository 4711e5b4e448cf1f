package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/examples/internal/exampletest"
	"github.com/xladdp/xladdp/internal/freeport"
	"github.com/xladdp/xladdp/xla"
)

// TestOneJobPerCheckpointDir: a second job started on the checkpoint
// directory of a running one (here under ddprun, the first spawned) is
// refused, naming the first job's process and host; after a kill -9 of
// the first, the same command takes the directory over, says so, and
// resumes from the dead job's checkpoint.
func TestOneJobPerCheckpointDir(t *testing.T) {
	exampletest.CleanEnv(t)
	ck, cache := t.TempDir(), t.TempDir()
	args := []string{"--epochs", "1000000", "--checkpoint-dir", ck, "--checkpoint-every", "20"}
	command := func(launcher []string, extra ...string) *exec.Cmd {
		argv := append(launcher, exampletest.Self()...)
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = append(append(os.Environ(), exampletest.Env("linear", append(extra, args...)...)...), xla.EnvCacheDir+"="+cache)
		return cmd
	}
	spawned := command(nil, "--spawn", "--cpu-devices", "2")
	first := exampletest.Start(t, spawned)
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(ck, "step-000000000020.safetensors"))
		return err == nil
	}, time.Minute, 20*time.Millisecond, "the first job's checkpoint: %s", first.Output())

	ddprun := []string{exampletest.Ddprun(t), "--nproc_per_node=2"}
	refused := command(ddprun)
	refused.WaitDelay = time.Second
	timer := time.AfterFunc(time.Minute, func() { _ = refused.Process.Kill() }) // a second job that runs on is the failure
	out, err := refused.CombinedOutput()
	timer.Stop()
	require.Error(t, err, "%s", out)
	host, _ := os.Hostname()
	assert.Contains(t, string(out), "belongs to a running job, process "+fmt.Sprint(spawned.Process.Pid)+" on "+host)
	assert.Contains(t, string(out), "give this job another --checkpoint-dir")

	_, _ = first.Signal(t, syscall.SIGKILL)
	second := exampletest.Start(t, command(ddprun))
	require.Eventually(t, func() bool {
		return strings.Contains(second.Output(), "resumed from "+ck)
	}, time.Minute, 20*time.Millisecond, "the second job resumes")
	assert.Contains(t, second.Output(), "took over the checkpoint directory from a job that is no longer running")
	assert.Contains(t, second.Output(), fmt.Sprintf("pid %d on %s", spawned.Process.Pid, host))
	res, _ := second.Signal(t, syscall.SIGTERM)
	assert.NotContains(t, res, "belongs to a running job")
}

// TestResumeKeepsTheSettings: a run resumed from --checkpoint-dir with
// another --lr is refused, naming the flag and both values; with
// --resume-override lr it trains on, saying what changed; an override
// naming no setting is refused.
func TestResumeKeepsTheSettings(t *testing.T) {
	exampletest.CleanEnv(t)
	ck, cache := t.TempDir(), t.TempDir()
	linear := func(args ...string) (string, error) {
		cmd := exec.Command(exampletest.Self()[0], exampletest.Self()[1:]...)
		cmd.Env = append(append(os.Environ(), exampletest.Env("linear", append([]string{"--spawn", "--cpu-devices", "2",
			"--checkpoint-dir", ck}, args...)...)...), xla.EnvCacheDir+"="+cache)
		cmd.WaitDelay = time.Second
		timer := time.AfterFunc(2*time.Minute, func() { _ = cmd.Process.Kill() })
		defer timer.Stop()
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := linear("--epochs", "2")
	require.NoError(t, err, out)

	out, err = linear("--epochs", "4", "--lr", "0.5")
	require.Error(t, err, out)
	assert.NotContains(t, out, "took over", "a job that ended gave its directory up")
	assert.Contains(t, out, "was written with other settings: --lr 0.1 → 0.5")
	assert.Contains(t, out, "say --resume-override lr")
	assert.NotContains(t, out, "epoch 3", "nothing trained")

	out, err = linear("--epochs", "4", "--lr", "0.5", "--seed", "2")
	require.Error(t, err, out)
	assert.Contains(t, out, "--lr 0.1 → 0.5, --seed 1 → 2")

	out, err = linear("--epochs", "4", "--lr", "0.5", "--resume-override", "lrr")
	require.Error(t, err, out)
	assert.Contains(t, out, "--resume-override lrr: not a setting this program's checkpoints record (it records batch-size, lr, seed)")

	out, err = linear("--epochs", "4", "--lr", "0.5", "--resume-override", "lr")
	require.NoError(t, err, out)
	assert.Contains(t, out, "resuming with changed settings")
	assert.Contains(t, out, "--lr 0.1 → 0.5")
	assert.Contains(t, out, "resumed from "+ck)

	out, err = linear("--epochs", "6", "--lr", "0.5")
	require.NoError(t, err, out)
	assert.NotContains(t, out, "changed settings", "the overridden value is the checkpoint's from then on")
}

// TestDeterministicRefusesFastMath: with XLA_FLAGS turning on fast math
// (which gave other weights on 1 replica than on 2), --deterministic is
// refused at start, naming the flag.
func TestDeterministicRefusesFastMath(t *testing.T) {
	exampletest.CleanEnv(t)
	cmd := exec.Command(exampletest.Self()[0], exampletest.Self()[1:]...)
	cmd.Env = append(append(os.Environ(), exampletest.Env("linear", "--spawn", "--deterministic")...),
		"XLA_FLAGS=--xla_cpu_enable_fast_math=true", xla.EnvCacheDir+"="+t.TempDir())
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "%s", out)
	assert.Contains(t, string(out), "XLA_FLAGS sets --xla_cpu_enable_fast_math=true")
	assert.NotContains(t, string(out), "weights sha256")
}

// TestDeterministicSaysWhatItLeavesOut: at the defaults (100 samples in
// global batches of 30) the deterministic run says that each epoch leaves
// out 10 samples, as torch's drop_last (it trained on 90 in silence); a
// batch that divides 100 says nothing.
func TestDeterministicSaysWhatItLeavesOut(t *testing.T) {
	exampletest.CleanEnv(t)
	run := func(args ...string) string {
		cmd := exec.Command(exampletest.Self()[0], exampletest.Self()[1:]...)
		cmd.Env = append(os.Environ(), exampletest.Env("linear", append([]string{"--spawn", "--deterministic", "--epochs", "1"}, args...)...)...)
		cmd.WaitDelay = time.Second
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		return string(out)
	}
	assert.Contains(t, run(), "note: --deterministic trains on whole global batches of 30: each epoch leaves out 10 of the 100 samples")
	assert.NotContains(t, run("--batch-size", "10"), "leaves out")
}

// TestCtrlCKeepsTheSteps: Ctrl-C (SIGINT) to a --spawn run with a
// checkpoint directory commits the step it stands at and exits 75,
// saying so and that the same command resumes (before, it exited 1 and
// the steps since the last periodic checkpoint were lost in silence); the
// same command then resumes past the periodic checkpoint.
func TestCtrlCKeepsTheSteps(t *testing.T) {
	exampletest.CleanEnv(t)
	ck := t.TempDir()
	cmd := exec.Command(exampletest.Self()[0], exampletest.Self()[1:]...)
	cmd.Env = append(append(os.Environ(), exampletest.Env("linear", "--spawn", "--cpu-devices", "2", "--epochs", "1000000",
		"--checkpoint-every", "1000000", "--checkpoint-dir", ck)...), xla.EnvCacheDir+"="+t.TempDir())
	run := exampletest.Start(t, cmd)
	require.Eventually(t, func() bool { return strings.Contains(run.Output(), "epoch 3:") }, time.Minute, 20*time.Millisecond,
		"three epochs: %s", run.Output())
	out, err := run.Signal(t, syscall.SIGINT)
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, out)
	assert.Equal(t, 75, exit.ExitCode(), out)
	assert.Contains(t, out, "interrupt: committing this step's checkpoint, then stopping")
	assert.Regexp(t, `step \d+ is committed in `+regexp.QuoteMeta(ck)+`; the same command resumes from it`, out)
	steps, err := filepath.Glob(filepath.Join(ck, "step-*.safetensors"))
	require.NoError(t, err)
	assert.Len(t, steps, 1, "the step Ctrl-C came at")
}

// TestCtrlCUnderDdprun: under ddprun the first Ctrl-C is the same notice
// (the workers commit their step and the job exits 75, saying so); a
// second, while the workers have not stopped (here they are SIGSTOPped),
// stops them at once (exit 130), none left running.
func TestCtrlCUnderDdprun(t *testing.T) {
	exampletest.CleanEnv(t)
	for _, twice := range []bool{false, true} {
		ck := t.TempDir()
		argv := append([]string{exampletest.Ddprun(t), "--nproc_per_node=2"}, exampletest.Self()...)
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = append(append(os.Environ(), exampletest.Env("linear", "--epochs", "1000000", "--checkpoint-every", "1000000",
			"--checkpoint-dir", ck)...), xla.EnvCacheDir+"="+t.TempDir())
		run := exampletest.Start(t, cmd)
		require.Eventually(t, func() bool { return strings.Contains(run.Output(), "epoch 3:") }, time.Minute, 20*time.Millisecond,
			"three epochs: %s", run.Output())
		workers := run.Workers()
		require.NotEmpty(t, workers)
		if twice {
			for _, pid := range workers { // stopped, they cannot commit before the second Ctrl-C
				require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
			}
			require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
			require.Eventually(t, func() bool { return strings.Contains(run.Output(), "interrupt again") }, time.Minute, 10*time.Millisecond)
		}
		out, err := run.Signal(t, syscall.SIGINT)
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, out)
		if !twice {
			assert.Equal(t, 75, exit.ExitCode(), out)
			assert.Contains(t, out, "ddprun: interrupt: stopping the workers; those that keep checkpoints (--checkpoint-dir) commit their step first")
			assert.Contains(t, out, "the same command resumes from it")
			continue
		}
		assert.Equal(t, 130, exit.ExitCode(), out)
		assert.Contains(t, out, "ddprun: stopping the workers at once")
		for _, pid := range workers {
			assert.Eventually(t, func() bool { return syscall.Kill(pid, 0) != nil }, 10*time.Second, 20*time.Millisecond,
				"worker %d ended with ddprun", pid)
		}
	}
}

// TestLongLostNodeIsNamed: in an elastic job of two nodes (--nnodes=1:2),
// kill -9 of node 1 (its ddprun and worker) makes node 0 restart alone
// saying that node 1 was lost, naming its agent (host, pid), not blaming
// its own worker, which failed for that (LoseANode checks the line).
func TestLongLostNodeIsNamed(t *testing.T) {
	exampletest.CleanEnv(t)
	out := exampletest.LoseANode(t, "linear", []string{"--epochs", "300", "--checkpoint-every", "20"}, 2, exampletest.Marks("epoch %d: ", 40, 60, 80))
	assert.NotContains(t, out, "worker failed: node 0")
}

// TestNoStepLostWithANode: an elastic job of three nodes
// (--nnodes=2:3, deterministic) loses one at a random moment (kill -9 of
// its ddprun and worker): the survivors commit the last step they
// completed, go on without it within the run from that very step, and
// train the uninterrupted job's weights, bit for bit: regrouped in the
// same processes, and restarted (--restart_on_peer_loss); with one
// process a node, and with two replicas in each (--spawn).
func TestNoStepLostWithANode(t *testing.T) {
	exampletest.CleanEnv(t)
	args := []string{"--epochs", "300", "--deterministic", "--checkpoint-every", "1000"}
	want := exampletest.WeightsDigest(t, exampletest.Spawned(1).Run(t, "linear", args...)) // any world size's
	for _, path := range []struct {
		name string
		lose func(t *testing.T, name string, args []string, nodes int, marks []string) string
		args []string
	}{
		{"in place", exampletest.LoseANode, nil},
		{"restarted", exampletest.LoseANodeRestarting, nil},
		{"two local replicas a node, in place", exampletest.LoseANode, []string{"--spawn", "--cpu-devices", "2"}},
		{"two local replicas a node, restarted", exampletest.LoseANodeRestarting, []string{"--spawn", "--cpu-devices", "2"}},
	} {
		t.Run(path.name, func(t *testing.T) {
			out := path.lose(t, "linear", append(slices.Clone(args), path.args...), 3, exampletest.Marks("epoch %d: ", 40, 80, 120, 160, 200))
			assert.Equal(t, want, exampletest.WeightsDigest(t, out), "the job that lost a node trained other weights")
		})
	}
}

// TestCheckpointDirOfEachNodeIsSaid: two nodes given directories of
// their own (a per-node disk) are told as the job starts, where a lost
// node's survivors would commit where the others cannot read; one
// directory both see says nothing.
func TestCheckpointDirOfEachNodeIsSaid(t *testing.T) {
	exampletest.CleanEnv(t)
	job := func(dirs [2]string) string {
		port, err := freeport.Pick("127.0.0.1")
		require.NoError(t, err)
		var nodes [2]*exampletest.Running
		for n, dir := range dirs {
			argv := append([]string{exampletest.Ddprun(t), "--nnodes=2", fmt.Sprintf("--node_rank=%d", n), "--nproc_per_node=1",
				"--master_addr=127.0.0.1", fmt.Sprintf("--master_port=%d", port)}, exampletest.Self()...)
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Env = append(os.Environ(), exampletest.Env("linear", "--epochs", "3", "--checkpoint-dir", dir)...)
			nodes[n] = exampletest.Start(t, cmd)
		}
		var out string
		for _, n := range nodes {
			o, err := n.Wait()
			require.NoError(t, err, "%s", o)
			out += o
		}
		return out
	}
	own := job([2]string{t.TempDir(), t.TempDir()})
	assert.Contains(t, own, "is not one directory every rank sees (each node its own?)")
	shared := t.TempDir()
	assert.NotContains(t, job([2]string{shared, shared}), "is not one directory every rank sees")
	names, err := filepath.Glob(filepath.Join(shared, ".xladdp-shared-check*"))
	require.NoError(t, err)
	assert.Empty(t, names, "the check leaves nothing behind")
}

// TestRestartWithoutCheckpointIsSaid: a job restarted after a kill -9
// with nothing to resume from (no --checkpoint-dir) says that training
// starts from step 0, instead of doing it in silence.
func TestRestartWithoutCheckpointIsSaid(t *testing.T) {
	exampletest.CleanEnv(t)
	argv := append([]string{exampletest.Ddprun(t), "--nproc_per_node=2", "--max_restarts=1"}, exampletest.Self()...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), exampletest.Env("linear", "--epochs", "400")...)
	r := exampletest.Start(t, cmd)
	r.Await(t, exampletest.Marks("epoch %d: ", 20, 40), rand.New(rand.NewPCG(1, 2)))
	workers := r.Workers()
	require.NotEmpty(t, workers)
	require.NoError(t, syscall.Kill(workers[0], syscall.SIGKILL))
	out, err := r.Wait()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, out, "note: restart 1 of the job, with no checkpoint to resume from (no --checkpoint-dir): training starts from step 0")
}

// TestSharedCheckSurvivesAPlantedFIFO: a FIFO where the shared-directory
// check writes its token is replaced, never opened: the job starts and
// says nothing of the directory.
func TestSharedCheckSurvivesAPlantedFIFO(t *testing.T) {
	exampletest.CleanEnv(t)
	dir := t.TempDir()
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, ".xladdp-shared-check"), 0o644))
	out := exampletest.Ranks(2).Run(t, "linear", "--epochs", "2", "--checkpoint-dir", dir)
	assert.NotContains(t, out, "is not one directory every rank sees")
}

// TestAJoiningNodeHealsFromALivePeer: a node that arrives while an
// elastic job runs below its largest size enters at a step boundary,
// healed from a live peer's memory (no file read), the job's workers
// regrouped in place (their pids kept), and the job trains the
// uninterrupted weights, bit for bit; a node of the job lost while the
// new one heals costs no completed step either (the survivors commit the
// held step and go on from it). Nodes of two local replicas each
// (--spawn under ddprun) join the same way.
func TestAJoiningNodeHealsFromALivePeer(t *testing.T) {
	exampletest.CleanEnv(t)
	args := []string{"--epochs", "2000", "--deterministic", "--checkpoint-every", "100000"}
	want := exampletest.WeightsDigest(t, exampletest.Spawned(1).Run(t, "linear", args...))
	marks := exampletest.Marks("epoch %d: ", 50, 100, 150, 200, 250)
	t.Run("a node joins", func(t *testing.T) {
		out := exampletest.JoinANode(t, "linear", args, 2, marks)
		assert.Equal(t, want, exampletest.WeightsDigest(t, out), "the job that grew trained other weights")
	})
	t.Run("a node lost while another heals", func(t *testing.T) {
		out := exampletest.JoinANodeAndLoseOne(t, "linear", args, 3, marks)
		assert.Equal(t, want, exampletest.WeightsDigest(t, out), "the job trained other weights")
	})
	t.Run("two local replicas a node", func(t *testing.T) {
		out := exampletest.JoinANode(t, "linear", append(slices.Clone(args), "--spawn", "--cpu-devices", "2"), 2, marks)
		assert.Equal(t, want, exampletest.WeightsDigest(t, out), "the job that grew trained other weights")
	})
}
