//go:build mpi

package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/examples/internal/exampletest"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/safetensors"
)

// namespaceHosts is three "hosts": network namespaces on a bridge, each
// with its own address, and an rsh agent for mpirun that runs a command
// on a host by entering its namespace (with its own host name), as ssh
// would on a real cluster. The agent logs each host it is asked for.
type namespaceHosts struct {
	addrs        []string
	subnet       string
	agent, calls string
}

func newNamespaceHosts(t *testing.T, n int) *namespaceHosts {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("hosts in network namespaces need root")
	}
	for _, tool := range []string{"ip", "unshare"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found (Debian's iproute2 and util-linux): the namespace hosts need it", tool)
		}
	}
	id := os.Getpid() % 10000
	net := fmt.Sprintf("10.79.%d", id%250)
	bridge := fmt.Sprintf("xlb%d", id)
	h := &namespaceHosts{subnet: net + ".0/24", calls: filepath.Join(t.TempDir(), "calls")}
	run := func(args ...string) {
		out, err := exec.Command("ip", args...).CombinedOutput()
		require.NoError(t, err, "ip %v: %s", args, out)
	}
	var names []string
	t.Cleanup(func() {
		for _, name := range names {
			_ = exec.Command("ip", "netns", "del", name).Run()
		}
		_ = exec.Command("ip", "link", "del", bridge).Run()
	})
	run("link", "add", bridge, "type", "bridge")
	run("addr", "add", net+".254/24", "dev", bridge)
	run("link", "set", bridge, "up")
	var cases strings.Builder
	for i := range n {
		name, addr := fmt.Sprintf("xl%dn%d", id, i), fmt.Sprintf("%s.%d", net, i+1)
		veth, port := fmt.Sprintf("xl%dv%d", id, i), fmt.Sprintf("xl%dp%d", id, i)
		names = append(names, name)
		run("netns", "add", name)
		run("-n", name, "link", "set", "lo", "up")
		run("link", "add", veth, "type", "veth", "peer", "name", port)
		run("link", "set", port, "master", bridge)
		run("link", "set", port, "up")
		run("link", "set", veth, "netns", name)
		run("-n", name, "addr", "add", addr+"/24", "dev", veth)
		run("-n", name, "link", "set", veth, "up")
		h.addrs = append(h.addrs, addr)
		fmt.Fprintf(&cases, "%s) ns=%s;;\n", addr, name)
	}
	h.agent = filepath.Join(t.TempDir(), "nsrsh")
	script := "#!/bin/sh\n# mpirun's rsh agent: nsrsh HOST COMMAND...\nhost=$1; shift\ncase $host in\n" + cases.String() +
		"*) echo \"nsrsh: unknown host $host\" >&2; exit 1;;\nesac\necho \"$host $ns\" >> " + h.calls + "\n" +
		"exec ip netns exec \"$ns\" unshare --uts sh -c 'hostname \"$0\"; exec sh -c \"$1\"' \"$ns\" \"$*\"\n"
	require.NoError(t, os.WriteFile(h.agent, []byte(script), 0o755))
	return h
}

// readParams reads a checkpoint's model tensors as float32s by name.
func readParams(t *testing.T, path string) map[string][]float32 {
	t.Helper()
	f, err := safetensors.ReadFile(path)
	require.NoError(t, err)
	out := map[string][]float32{}
	for _, tensor := range f.Tensors {
		if !strings.HasPrefix(tensor.Name, "model.") {
			continue
		}
		require.Equal(t, "F32", tensor.DType, tensor.Name)
		v := make([]float32, len(tensor.Data)/4)
		require.NoError(t, binary.Read(bytes.NewReader(tensor.Data), binary.LittleEndian, v))
		out[tensor.Name] = v
	}
	require.NotEmpty(t, out, "no model tensors in %s", path)
	return out
}

// TestTrn1LayoutUnderMpirunAcrossNamespaces is the README's multi-node
// Trn1 recipe, as far as this machine allows: three hosts (network
// namespaces), one process per host started by mpirun over an rsh agent,
// each driving 2 local devices (--spawn: in-graph all-reduce across them)
// and all-reducing across hosts on the MPI backend. It trains to the
// parameters one process driving all 6 devices reaches, within 1e-6.
func TestTrn1LayoutUnderMpirunAcrossNamespaces(t *testing.T) {
	mpirun := exampletest.Mpirun(t)
	h := newNamespaceHosts(t, 3)
	exampletest.CleanEnv(t)
	dir := t.TempDir()
	single, layered := filepath.Join(dir, "single.safetensors"), filepath.Join(dir, "layered.safetensors")
	var out bytes.Buffer
	_, err := run(t.Context(), []string{"--spawn", "--cpu-devices", "6", "--checkpoint", single}, &out)
	require.NoError(t, err, out.String())

	args := []string{"--spawn", "--cpu-devices", "2", "--backend", "mpi", "--checkpoint", layered}
	env := append(exampletest.Env("linear", args...), xla.EnvCacheDir+"="+t.TempDir())
	cmdArgs := []string{"--allow-run-as-root", "--mca", "plm_rsh_agent", h.agent, "--host", strings.Join(h.addrs, ","), "-np", "3",
		"--mca", "oob_tcp_if_include", h.subnet, "--mca", "btl_tcp_if_include", h.subnet, "--mca", "btl", "tcp,self"}
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		cmdArgs = append(cmdArgs, "-x", name)
	}
	cmd := exec.CommandContext(t.Context(), mpirun, append(cmdArgs, exampletest.Self()...)...)
	cmd.Env = append(os.Environ(), env...)
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", b)
	assert.Contains(t, string(b), "rank 5: In Model: input size [5 5] output size [5 2]", "6 replicas: 3 hosts × 2 devices")

	calls, err := os.ReadFile(h.calls)
	require.NoError(t, err)
	hosts := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(calls)), "\n") {
		hosts[line] = true
	}
	assert.Len(t, hosts, 3, "mpirun reached each host through the agent:\n%s", calls)

	want, got := readParams(t, single), readParams(t, layered)
	require.Equal(t, len(want), len(got))
	for name, w := range want {
		g := got[name]
		require.Len(t, g, len(w), name)
		for i := range w {
			assert.LessOrEqual(t, math.Abs(float64(g[i]-w[i])), 1e-6, "%s[%d]: %g across hosts, %g in one process", name, i, g[i], w[i])
		}
	}
}
