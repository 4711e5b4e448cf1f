package exampletest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// NamespaceHosts are "hosts": network namespaces on a bridge, each
// with its own address, and an rsh agent for mpirun that runs a command
// on a host by entering its namespace (with its own host name), as ssh
// would on a real cluster. The agent logs each host it is asked for.
type NamespaceHosts struct {
	Addrs        []string // each host's address
	Subnet       string   // their network, for mpirun's --mca *_if_include
	Agent, Calls string   // mpirun's rsh agent, and the file it logs each host to
	names        []string
}

// hostSets counts the NewNamespaceHosts calls of this process.
var hostSets atomic.Int32

// NewNamespaceHosts makes n hosts, removed when the test ends; it skips
// the test without root or ip and unshare.
func NewNamespaceHosts(t *testing.T, n int) *NamespaceHosts {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("hosts in network namespaces need root")
	}
	for _, tool := range []string{"ip", "unshare"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found (Debian's iproute2 and util-linux): the namespace hosts need it", tool)
		}
	}
	// Names of this process's own, new on every call: a veth of the last
	// call may still be on its way out.
	id := fmt.Sprintf("%d%c", os.Getpid()%10000, 'a'+hostSets.Add(1)%26)
	net := fmt.Sprintf("10.79.%d", os.Getpid()%250)
	bridge := fmt.Sprintf("xlb%s", id)
	h := &NamespaceHosts{Subnet: net + ".0/24", Calls: filepath.Join(t.TempDir(), "calls")}
	run := func(args ...string) {
		out, err := exec.Command("ip", args...).CombinedOutput()
		require.NoError(t, err, "ip %v: %s", args, out)
	}
	t.Cleanup(func() {
		for _, name := range h.names {
			_ = exec.Command("ip", "netns", "del", name).Run()
		}
		_ = exec.Command("ip", "link", "del", bridge).Run()
	})
	run("link", "add", bridge, "type", "bridge")
	run("addr", "add", net+".254/24", "dev", bridge)
	run("link", "set", bridge, "up")
	var cases strings.Builder
	for i := range n {
		name, addr := fmt.Sprintf("xl%sn%d", id, i), fmt.Sprintf("%s.%d", net, i+1)
		veth, port := fmt.Sprintf("xl%sv%d", id, i), fmt.Sprintf("xl%sp%d", id, i)
		h.names = append(h.names, name)
		run("netns", "add", name)
		run("-n", name, "link", "set", "lo", "up")
		run("link", "add", veth, "type", "veth", "peer", "name", port)
		run("link", "set", port, "master", bridge)
		run("link", "set", port, "up")
		run("link", "set", veth, "netns", name)
		run("-n", name, "addr", "add", addr+"/24", "dev", veth)
		run("-n", name, "link", "set", veth, "up")
		h.Addrs = append(h.Addrs, addr)
		fmt.Fprintf(&cases, "%s) ns=%s;;\n", addr, name)
	}
	h.Agent = filepath.Join(t.TempDir(), "nsrsh")
	script := "#!/bin/sh\n# mpirun's rsh agent: nsrsh HOST COMMAND...\nhost=$1; shift\ncase $host in\n" + cases.String() +
		"*) echo \"nsrsh: unknown host $host\" >&2; exit 1;;\nesac\necho \"$host $ns\" >> " + h.Calls + "\n" +
		"exec ip netns exec \"$ns\" unshare --uts sh -c 'hostname \"$0\"; exec sh -c \"$1\"' \"$ns\" \"$*\"\n"
	require.NoError(t, os.WriteFile(h.Agent, []byte(script), 0o755))
	return h
}

// Command is argv run on host i: in its network namespace.
func (h *NamespaceHosts) Command(i int, argv ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", h.names[i]}, argv...)...)
}

// place runs cmd (its arguments and environment) on host i.
func (h *NamespaceHosts) place(i int, cmd *exec.Cmd) *exec.Cmd {
	on := h.Command(i, cmd.Args...)
	on.Env = cmd.Env
	return on
}
