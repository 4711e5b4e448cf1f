package exampletest

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Layout is one way a user launches an example: the example alone
// (Spawn's flags in Args), under ddprun (Launch), under mpirun (Mpirun:
// mpirun's flags), or on Hosts network-namespace hosts (a ddprun each,
// one process a host), with extra example flags.
type Layout struct {
	Name   string
	Launch []string
	Mpirun []string
	Hosts  int
	Args   []string
}

// NamespaceHostsLayout is n network-namespace hosts, one process each; the
// test skips where it cannot make them (not root).
func NamespaceHostsLayout(n int, extra ...string) Layout {
	return Layout{Name: fmt.Sprintf("%d namespace hosts", n), Hosts: n, Args: extra}
}

// Spawned is the example alone on n local replicas (--spawn).
func Spawned(n int, extra ...string) Layout {
	return Layout{Name: fmt.Sprintf("spawn %d", n), Args: append([]string{"--spawn", "--cpu-devices", strconv.Itoa(n)}, extra...)}
}

// Ranks is n processes under ddprun, one replica each.
func Ranks(n int, extra ...string) Layout {
	return Layout{Name: fmt.Sprintf("ddprun %d", n), Launch: []string{"--nproc_per_node=" + strconv.Itoa(n)}, Args: extra}
}

// MPIRanks is n processes under mpirun on the mpi backend.
func MPIRanks(t *testing.T, n int, extra ...string) Layout {
	return Layout{Name: fmt.Sprintf("mpirun %d", n), Mpirun: []string{Mpirun(t), "--allow-run-as-root", "--oversubscribe", "-np", strconv.Itoa(n)},
		Args: append([]string{"--backend", "mpi"}, extra...)}
}

var weightsLine = regexp.MustCompile(`weights sha256 ([0-9a-f]{64})`)

// WeightsDigest is the "weights sha256" a run printed.
func WeightsDigest(t *testing.T, out string) string {
	t.Helper()
	m := weightsLine.FindStringSubmatch(out)
	require.NotNil(t, m, "no weights sha256 line in:\n%s", out)
	return m[1]
}

// Run runs example name with args in layout l to its end and returns its
// output.
func (l Layout) Run(t *testing.T, name string, args ...string) string {
	t.Helper()
	if l.Hosts > 0 {
		return l.runOnHosts(t, name, args)
	}
	cmd := Job{Name: name, Launch: l.Launch, Args: args}.command(t, l.Args...)
	if l.Mpirun != nil {
		mpi := exec.Command(l.Mpirun[0], append(append([]string(nil), l.Mpirun[1:]...), Self()...)...)
		mpi.Env = cmd.Env
		cmd = mpi
	}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s: %s", l.Name, out)
	return string(out)
}

// SameWeightsEverywhere runs example name with args (which hold
// --deterministic) in every layout and checks that all of them train
// the same weights, bit for bit; it returns their digest.
func SameWeightsEverywhere(t *testing.T, name string, args []string, layouts []Layout) string {
	t.Helper()
	var want, first string
	for _, l := range layouts {
		got := WeightsDigest(t, l.Run(t, name, args...))
		t.Logf("%s: weights sha256 %s", l.Name, got)
		if want == "" {
			want, first = got, l.Name
			continue
		}
		assert.Equal(t, want, got, "%s trained other weights than %s", l.Name, first)
	}
	return want
}

// runOnHosts runs the job on l.Hosts namespace hosts, host 0 the master,
// and returns host 0's output (rank 0's).
func (l Layout) runOnHosts(t *testing.T, name string, args []string) string {
	t.Helper()
	h := NewNamespaceHosts(t, l.Hosts)
	const port = "29513" // host 0's namespace is new: nothing else listens there
	runs := make([]*Running, l.Hosts)
	for node := range l.Hosts {
		argv := append([]string{Ddprun(t), "--nnodes=" + strconv.Itoa(l.Hosts), "--node_rank=" + strconv.Itoa(node),
			"--nproc_per_node=1", "--master_addr=" + h.Addrs[0], "--master_port=" + port}, Self()...)
		cmd := h.Command(node, argv...)
		cmd.Env = append(os.Environ(), Env(name, append(append([]string(nil), args...), l.Args...)...)...)
		runs[node] = Start(t, cmd)
	}
	var first string
	for node, r := range runs {
		out, err := r.Wait()
		require.NoError(t, err, "host %d: %s", node, out)
		if node == 0 {
			first = out
		}
	}
	return first
}
