package launch

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/ddp/launch/internal/preflight"
	"github.com/xladdp/xladdp/neuron/trn/trntest"
)

// doctorRun is one `ddprun doctor` run in this process.
type doctorRun struct {
	code    int
	out     string
	elapsed time.Duration
}

func runDoctor(t *testing.T, args []string, environ ...string) doctorRun {
	t.Helper()
	c, err := ParseArgs(append([]string{"doctor"}, args...), func(string) string { return "" }, os.Stderr)
	require.NoError(t, err)
	require.True(t, c.Doctor)
	var out strings.Builder
	start := time.Now()
	code := Doctor(t.Context(), c, environ, &out)
	return doctorRun{code: code, out: out.String(), elapsed: time.Since(start)}
}

// seededWithin is how fast the doctor must find a seeded problem.
const seededWithin = 5 * time.Second

// TestDoctorFindsEachLocalMisconfiguration: each misconfiguration seeded
// on this host is found, within 5 s, with what to do; a clean setup
// finds nothing.
func TestDoctorFindsEachLocalMisconfiguration(t *testing.T) {
	holder, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer holder.Close()
	taken := strconv.Itoa(holder.Addr().(*net.TCPAddr).Port)
	for _, tc := range []struct {
		name    string
		args    []string
		environ []string
		says    []string
	}{
		{"clean", []string{"--nproc_per_node=2", "/bin/true"}, nil, []string{"no problem found"}},
		{"port taken", []string{"--nproc_per_node=2", "--master_port=" + taken, "/bin/true"}, nil,
			[]string{"--master_port=" + taken + ": port " + taken + " is taken by pid " + strconv.Itoa(os.Getpid()), "pick another port"}},
		{"master_addr unresolvable", []string{"--nproc_per_node=2", "--master_addr=no-such-host.invalid", "/bin/true"}, nil,
			[]string{"MASTER_ADDR=no-such-host.invalid does not resolve", "give node 0's IP address"}},
		{"shm too small", []string{"--nproc_per_node=4", "/bin/true"}, []string{"XLADDP_SHM_MIB=65536"},
			[]string{"/dev/shm has", "4 ranks' shared-memory slots of 65536 MiB need 262144 MiB", "XLADDP_SHM_MIB=0"}},
		{"no program", []string{"--nproc_per_node=2", "./not-built"}, nil, []string{"cannot start ./not-built"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := runDoctor(t, tc.args, tc.environ...)
			for _, s := range tc.says {
				assert.Contains(t, res.out, s)
			}
			assert.Equal(t, tc.name != "clean", res.code != 0, res.out)
			assert.Less(t, res.elapsed, seededWithin)
		})
	}
}

// fakeTrainium is a host tree of a trn1.32xlarge: its DMI name, EFA
// devices when efa, and a process holding /dev/neuron3 when held.
func fakeTrainium(t *testing.T, efa, held bool) preflight.Host {
	t.Helper()
	root := t.TempDir()
	h := preflight.ThisHost()
	h.Sys, h.Proc = filepath.Join(root, "sys"), filepath.Join(root, "proc")
	dmi := filepath.Join(h.Sys, "devices/virtual/dmi/id")
	require.NoError(t, os.MkdirAll(dmi, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dmi, "product_name"), []byte("trn1.32xlarge\n"), 0o644))
	if efa {
		require.NoError(t, os.MkdirAll(filepath.Join(h.Sys, "class/infiniband/rdmap16s27"), 0o755))
	}
	fd := filepath.Join(h.Proc, "4242", "fd")
	require.NoError(t, os.MkdirAll(fd, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(h.Proc, "4242", "cmdline"), []byte("python3\x00train.py\x00"), 0o644))
	if held {
		require.NoError(t, os.Symlink("/dev/neuron3", filepath.Join(fd, "7")))
	}
	h.Memlock = func() (uint64, error) { return ^uint64(0), nil }
	return h
}

// TestDoctorFindsEachTrainiumMisconfiguration: on a (stand-in) Trn1 host,
// NeuronCores another process holds, a job across nodes without EFA,
// with FI_PROVIDER set to another provider, or under a memlock limit.
func TestDoctorFindsEachTrainiumMisconfiguration(t *testing.T) {
	twoNodes := []string{"--nnodes=2", "--node_rank=0", "--nproc_per_node=32", "/bin/true"}
	plugin, runtimeDir := trntest.PluginNeedingRuntime(t)
	venv := t.TempDir()
	trntest.NewEnv(t, venv, trntest.Layout{Libneuronxla: "3.0.2891.0", Plugin: plugin})
	sdk := []string{"VIRTUAL_ENV=" + venv, "LD_LIBRARY_PATH=" + runtimeDir, "HOME=" + t.TempDir()}
	for _, tc := range []struct {
		name      string
		args      []string
		environ   []string
		efa, held bool
		memlock   uint64
		says      []string
	}{
		{name: "clean", args: twoNodes, efa: true},
		{name: "cores held", args: []string{"--nproc_per_node=32", "/bin/true"}, efa: true, held: true,
			says: []string{"of /dev/neuron3 are held by pid 4242 (python3 train.py)", "kill 4242", "NEURON_RT_VISIBLE_CORES"}},
		{name: "no efa", args: twoNodes, says: []string{"this trn1.32xlarge has no EFA device", "EFA interfaces"}},
		{name: "fi provider", args: twoNodes, efa: true, environ: []string{"FI_PROVIDER=tcp"},
			says: []string{"FI_PROVIDER=tcp on a 2-node Trainium job", "FI_PROVIDER=efa"}},
		{name: "memlock", args: twoNodes, efa: true, memlock: 64 << 10,
			says: []string{"the memlock limit is 64 KiB", "ulimit -l unlimited"}},
		{name: "one node needs no efa", args: []string{"--nproc_per_node=32", "/bin/true"}, environ: []string{"FI_PROVIDER=tcp"}, memlock: 64 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := fakeTrainium(t, tc.efa, tc.held)
			if tc.memlock != 0 {
				h.Memlock = func() (uint64, error) { return tc.memlock, nil }
			}
			c, err := ParseArgs(tc.args, func(string) string { return "" }, os.Stderr)
			require.NoError(t, err)
			start := time.Now()
			findings := localFindings(t.Context(), c, append(slices.Clone(sdk), tc.environ...), h)
			assert.Less(t, time.Since(start), seededWithin)
			var text []string
			for _, f := range findings {
				text = append(text, f.String())
			}
			all := strings.Join(text, "\n")
			if len(tc.says) == 0 {
				assert.Empty(t, findings)
			}
			for _, s := range tc.says {
				assert.Contains(t, all, s)
			}
		})
	}
}

// TestDoctorComparesTheNodes: the nodes' doctors meet at the master port
// and find a node rank given twice, a node that never came, another
// training binary and another PJRT plugin, each within 5 s.
func TestDoctorComparesTheNodes(t *testing.T) {
	t.Parallel() // mostly waiting, on ports of its own
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\n# "+text+"\n"), 0o755))
		return p
	}
	trainA, trainB := write("train-a", "a"), write("train-b", "b")
	pluginA, pluginB := write("plugin-a.so", "a"), write("plugin-b.so", "b")
	type node struct {
		rank    int
		program string
		environ []string
	}
	for _, tc := range []struct {
		name  string
		nodes []node
		says  []string
	}{
		{"same", []node{{0, trainA, nil}, {1, trainA, nil}}, []string{"no problem found"}},
		{"duplicate node rank", []node{{0, trainA, nil}, {1, trainA, nil}, {1, trainA, nil}},
			[]string{"2 nodes run with --node_rank=1", "give each node its own --node_rank", "node(s) [2] did not report"}},
		{"another binary", []node{{0, trainA, nil}, {1, trainB, nil}},
			[]string{"runs another training binary", "copy the same build to every node"}},
		{"another plugin", []node{{0, trainA, []string{"XLADDP_PJRT_PLUGIN=" + pluginA}}, {1, trainA, []string{"XLADDP_PJRT_PLUGIN=" + pluginB}}},
			[]string{"loads another PJRT plugin", "install the same plugin on every node"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port := strconv.Itoa(freeTestPort(t))
			nnodes := max(2, len(tc.nodes))
			if tc.name == "duplicate node rank" {
				nnodes = 3
			}
			runs := make([]doctorRun, len(tc.nodes))
			var wg sync.WaitGroup
			for i, n := range tc.nodes {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if n.rank != 0 {
						time.Sleep(50 * time.Millisecond) // node 0 hosts the meeting
					}
					runs[i] = runDoctor(t, []string{fmt.Sprintf("--nnodes=%d", nnodes), fmt.Sprintf("--node_rank=%d", n.rank),
						"--master_addr=127.0.0.1", "--master_port=" + port, "--nproc_per_node=1", n.program}, n.environ...)
				}()
			}
			wg.Wait()
			var all []string
			for _, r := range runs {
				all = append(all, r.out)
				assert.Less(t, r.elapsed, seededWithin, r.out)
			}
			joined := strings.Join(all, "\n")
			for _, s := range tc.says {
				assert.Contains(t, joined, s)
			}
			if tc.name == "same" {
				for _, r := range runs {
					assert.Equal(t, 0, r.code, r.out)
				}
			}
		})
	}
}

// TestDoctorSaysWhenMasterIsUnreachable: from another "host" (a network
// namespace), a MASTER_ADDR nobody answers at is found within 5 s.
func TestDoctorSaysWhenMasterIsUnreachable(t *testing.T) {
	t.Parallel() // the only parallel test in network namespaces
	hosts := newNetnsHosts(t)
	bin := buildDdprun(t)
	absent := strings.TrimSuffix(hosts.addrs[0], ".1") + ".9" // on the link, held by nobody
	start := time.Now()
	out, err := hosts.command(1, bin, "doctor", "--nnodes=2", "--node_rank=1", "--master_addr="+absent,
		"--master_port=29500", "--nproc_per_node=1", "/bin/true").CombinedOutput()
	require.Error(t, err, "%s", out)
	assert.Contains(t, string(out), absent+":29500 (MASTER_ADDR:MASTER_PORT) is unreachable from here")
	assert.Contains(t, string(out), "firewall or security group")
	assert.Less(t, time.Since(start), seededWithin)
}

// TestCheckBeforeLaunch: --check runs the doctor's checks of this node
// first; a problem stops the launch before any worker starts.
func TestCheckBeforeLaunch(t *testing.T) {
	res := runAgent(t.Context(), t, "check", "ok", []string{"--check", "--nproc_per_node=3"}, "XLADDP_SHM_MIB=65536")
	assert.Equal(t, 1, res.code)
	assert.Contains(t, res.stderr, "ddprun: --check: /dev/shm has")
	assert.Contains(t, res.stderr, "--check found 1 problem(s); nothing was started")
	assert.Empty(t, res.stdout, "no worker ran")
	res = runAgent(t.Context(), t, "check", "ok", []string{"--check", "--nproc_per_node=2"})
	assert.Equal(t, 0, res.code, res.stderr)
	assert.Equal(t, 2, strings.Count(res.stdout, "sum 1\n"), res.stdout)
}
