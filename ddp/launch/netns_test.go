package launch

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/neuron/neurontest"
)

// netnsHosts is two "hosts": network namespaces joined by a veth pair,
// 10.77.<n>.1 and 10.77.<n>.2.
type netnsHosts struct {
	names [2]string
	addrs [2]string
	veths [2]string
}

// newNetnsHosts creates the namespaces, or skips saying why it cannot.
func newNetnsHosts(t *testing.T) *netnsHosts {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("two hosts need network namespaces, which need root")
	}
	for _, tool := range []string{"ip", "unshare"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found (Debian's iproute2 and util-linux): two hosts need it", tool)
		}
	}
	id := os.Getpid() % 10000
	h := &netnsHosts{
		names: [2]string{fmt.Sprintf("xl%da", id), fmt.Sprintf("xl%db", id)},
		addrs: [2]string{fmt.Sprintf("10.77.%d.1", id%250), fmt.Sprintf("10.77.%d.2", id%250)},
		veths: [2]string{fmt.Sprintf("xv%da", id), fmt.Sprintf("xv%db", id)},
	}
	run := func(args ...string) {
		out, err := exec.Command("ip", args...).CombinedOutput()
		require.NoError(t, err, "ip %v: %s", args, out)
	}
	t.Cleanup(func() {
		for _, n := range h.names {
			_ = exec.Command("ip", "netns", "del", n).Run()
		}
	})
	for _, n := range h.names {
		run("netns", "add", n)
		run("-n", n, "link", "set", "lo", "up")
	}
	run("link", "add", h.veths[0], "type", "veth", "peer", "name", h.veths[1])
	for i, n := range h.names {
		run("link", "set", h.veths[i], "netns", n)
		run("-n", n, "addr", "add", h.addrs[i]+"/24", "dev", h.veths[i])
		run("-n", n, "link", "set", h.veths[i], "up")
	}
	return h
}

// command runs args on host i, with its own host name.
func (h *netnsHosts) command(i int, args ...string) *exec.Cmd {
	script := fmt.Sprintf("hostname host%d && exec \"$@\"", i)
	return exec.Command("ip", append([]string{"netns", "exec", h.names[i], "unshare", "--uts", "sh", "-c", script, "sh"}, args...)...)
}

// buildDdprun builds the command into a temporary directory.
func buildDdprun(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "ddprun")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/xladdp/xladdp/cmd/ddprun").CombinedOutput()
	require.NoError(t, err, "%s", out)
	return bin
}

func fieldAfter(out, marker string) string {
	for _, line := range strings.Split(out, "\n") {
		if _, v, ok := strings.Cut(line, marker); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// TestTwoHostsInNetworkNamespaces: one ddprun agent per "host" (network
// namespaces joined by a veth pair, distinct addresses and host names),
// 2 workers each, c10d and static, train to the parameters one node with
// 4 workers reaches; then again with 5 ms of latency on the link.
func TestTwoHostsInNetworkNamespaces(t *testing.T) {
	h := newNetnsHosts(t)
	ddprun := buildDdprun(t)
	single := runAgent(t.Context(), t, "single4", "train", []string{"--nproc_per_node=4"}, "XLADDP_TEST_DIR="+t.TempDir())
	require.Equal(t, 0, single.code, single.stderr)
	want := fieldAfter(single.stdout, "]:PARAMS ")
	require.NotEmpty(t, want)

	run := func(t *testing.T, backend string, env ...string) (string, string) {
		outs, errs := runHosts(t, h, ddprun, backend, env...)
		for i, err := range errs {
			require.NoError(t, err, "host %d: %s", i, outs[i])
		}
		all := outs[0] + outs[1]
		return fieldAfter(all, "]:PARAMS "), fieldAfter(all, "]:STEPMS ")
	}
	for _, backend := range []string{"c10d", "static"} {
		t.Run(backend, func(t *testing.T) {
			got, stepMS := run(t, backend)
			assert.Equal(t, want, got, "two hosts trained to different parameters than one node with 4 workers")
			t.Logf("two hosts, %s: %s ms per step", backend, stepMS)
		})
	}
	// Rank 1 (host 0) is SIGKILLed at step 12: both agents fail, naming
	// it, and no process of the job is left on either host.
	t.Run("sigkill", func(t *testing.T) {
		mark := "netnskill" + strconv.FormatInt(time.Now().UnixNano(), 36)
		start := time.Now()
		outs, errs := runHosts(t, h, ddprun, "static", "XLADDP_TEST_KILL=1", "XLADDP_LAUNCH_TEST_MARK="+mark)
		for i, err := range errs {
			assert.Error(t, err, "host %d's ddprun succeeded", i)
			assert.Contains(t, outs[i], "node 0, rank 1 (local rank 1): signal SIGKILL", "host %d", i)
		}
		assert.Less(t, time.Since(start), 15*time.Second)
		assertNothingLeft(t, mark, nil)
	})
	t.Run("netem 5ms", func(t *testing.T) {
		out, err := exec.Command("ip", "netns", "exec", h.names[1], "tc", "qdisc", "add", "dev", h.veths[1], "root", "netem", "delay", "5ms").CombinedOutput()
		if err != nil {
			// Only a kernel without the netem qdisc is a reason to skip;
			// any other failure of the command is the test's.
			require.Contains(t, string(out), "Specified qdisc kind is unknown", "tc netem failed: %v", err)
			t.Skipf("this kernel has no netem qdisc (sch_netem), so no latency can be added: %s", strings.TrimSpace(string(out)))
		}
		got, stepMS := run(t, "static")
		assert.Equal(t, want, got)
		t.Logf("two hosts, 5 ms one-way delay: %s ms per step", stepMS)
	})
}

// runHosts runs one ddprun agent per host (2 workers each, the "train"
// scenario) and returns each agent's output and error.
func runHosts(t *testing.T, h *netnsHosts, ddprun, backend string, env ...string) ([2]string, [2]error) {
	t.Helper()
	return runHostsScenario(t, h, ddprun, backend, "train", env...)
}

// runHostsScenario is runHosts with another worker scenario.
func runHostsScenario(t *testing.T, h *netnsHosts, ddprun, rdzv, scenario string, env ...string) ([2]string, [2]error) {
	t.Helper()
	hosts := startHosts(t, h, ddprun, rdzv, scenario, t.TempDir(), env...)
	return hosts.wait()
}

// hostAgents are the two agents startHosts started.
type hostAgents struct {
	cmds [2]*exec.Cmd
	outs [2]*syncBuffer
	errs [2]error
	wg   sync.WaitGroup
}

// startHosts starts one ddprun agent per host (2 workers each, running
// scenario with $XLADDP_TEST_DIR=dir), host 0 first.
func startHosts(t *testing.T, h *netnsHosts, ddprun, rdzv, scenario, dir string, env ...string) *hostAgents {
	t.Helper()
	a := &hostAgents{}
	for i := range 2 {
		args := []string{ddprun, "--nnodes=2", "--nproc_per_node=2", "--rdzv_id=netns", "--rdzv_conf=timeout=60"}
		if rdzv == "c10d" {
			args = append(args, "--rdzv_backend=c10d", "--rdzv_endpoint="+h.addrs[0]+":29411")
		} else {
			args = append(args, "--node_rank="+strconv.Itoa(i), "--master_addr="+h.addrs[0], "--master_port=29412")
		}
		args = append(args, os.Args[0], "-test.run=^$")
		cmd := h.command(i, args...)
		cmd.Env = append(os.Environ(), workerEnvName+"="+scenario, "XLADDP_TEST_DIR="+dir, "RANK=", "WORLD_SIZE=", "MASTER_ADDR=", "MASTER_PORT=")
		cmd.Env = append(cmd.Env, env...)
		a.outs[i] = &syncBuffer{}
		cmd.Stdout, cmd.Stderr = a.outs[i], a.outs[i]
		require.NoError(t, cmd.Start())
		a.cmds[i] = cmd
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			a.errs[i] = cmd.Wait()
		}()
		if i == 0 {
			time.Sleep(200 * time.Millisecond)
		}
	}
	return a
}

// wait returns each agent's output and error once both have ended.
func (a *hostAgents) wait() ([2]string, [2]error) {
	a.wg.Wait()
	return [2]string{a.outs[0].String(), a.outs[1].String()}, a.errs
}

// TestNeuronEnvironmentOnTwoHosts: a 2-node × 2-process ddprun launch in
// the network namespaces, target neuron with the stand-in plugin: each
// worker's bootstrap sets the variables torch-xla's
// configure_pjrt_environment (torch_xla/_internal/neuron.py) sets for the
// same torchrun job; the golden values below are written from that source.
func TestNeuronEnvironmentOnTwoHosts(t *testing.T) {
	h := newNetnsHosts(t)
	ddprun := buildDdprun(t)
	standIn := neurontest.StandInForCPU(t, t.TempDir(), "")
	outs, errs := runHostsScenario(t, h, ddprun, "static", "neuron-env", append(standIn, "XLADDP_DEVICE=neuron")...)
	for i, err := range errs {
		require.NoError(t, err, "host %d: %s", i, outs[i])
	}
	got := map[string]map[string]string{}
	for _, line := range strings.Split(outs[0]+outs[1], "\n") {
		if _, js, ok := strings.Cut(line, "]:NEURONENV "); ok {
			var env map[string]string
			require.NoError(t, json.Unmarshal([]byte(js), &env))
			got[env["RANK"]] = env
		}
	}
	require.Len(t, got, 4)
	for rank := range 4 {
		lr := rank % 2
		want := map[string]string{"RANK": strconv.Itoa(rank),
			"NEURON_RT_ROOT_COMM_ID":            h.addrs[0] + ":62182", // MASTER_ADDR:62182
			"NEURON_PJRT_PROCESS_INDEX":         strconv.Itoa(rank),    // RANK
			"NEURON_PJRT_PROCESSES_NUM_DEVICES": "1,1,1,1",             // one core per process
			"NEURON_PJRT_WORLD_SIZE":            "",
			"PJRT_LOCAL_PROCESS_COUNT":          "2",              // LOCAL_WORLD_SIZE
			"PJRT_LOCAL_PROCESS_RANK":           strconv.Itoa(lr), // LOCAL_RANK
			"NEURON_RT_VISIBLE_CORES":           strconv.Itoa(lr), // LOCAL_RANK
			"FI_PROVIDER":                       "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "FI_EFA_FORK_SAFE": "1"}
		assert.Equal(t, want, got[strconv.Itoa(rank)], "rank %d", rank)
	}
}

// TestLongPreemptionOnTwoHosts (make test-long): SIGTERM to both hosts' ddprun mid-run (a Spot
// notice reaches every instance) commits one coordinated checkpoint
// within one step + 10 s, and both exit 75; the same commands run again
// resume and end with the parameters of an uninterrupted run, bit for bit.
func TestLongPreemptionOnTwoHosts(t *testing.T) {
	h := newNetnsHosts(t)
	ddprun := buildDdprun(t)
	whole := runAgent(t.Context(), t, "whole4", "preemptible", []string{"--nproc_per_node=4"}, "XLADDP_TEST_DIR="+t.TempDir())
	require.Equal(t, 0, whole.code, whole.stderr)
	want := finalParams(whole.stdout)
	require.NotEmpty(t, want)

	dir := t.TempDir() // the hosts' shared checkpoint directory
	agents := startHosts(t, h, ddprun, "static", "preemptible", dir)
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(dir, "at-10-3")); err == nil {
			break
		}
	}
	signalled := time.Now()
	for _, cmd := range agents.cmds {
		require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	}
	outs, errs := agents.wait()
	assert.Less(t, time.Since(signalled), 10*time.Second, "checkpointed within one step + 10 s")
	for i, err := range errs {
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "host %d: %s", i, outs[i])
		assert.Equal(t, 75, ee.ExitCode(), "host %d: %s", i, outs[i])
		assert.Contains(t, outs[i], "ddprun: preempted", "host %d", i)
	}
	again := startHosts(t, h, ddprun, "static", "preemptible", dir)
	outs, errs = again.wait()
	for i, err := range errs {
		require.NoError(t, err, "host %d: %s", i, outs[i])
	}
	assert.Contains(t, outs[0], "[rank0]:resumed at ")
	assert.Equal(t, want, finalParams(outs[0]+outs[1]), "the resumed job's parameters differ from an uninterrupted run's")
}
