package examples

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/examples/internal/exampletest"
	"github.com/xladdp/xladdp/internal/freeport"
	"github.com/xladdp/xladdp/xla"
)

// twoNodes runs one ddprun agent per node for the toy on the Neuron SDK 3
// stand-in (2 workers each), each node with its own compile cache, and
// returns the job's metrics lines ($XLADDP_METRICS_FILE).
type twoNodes struct {
	bin, master string
	caches      [2]string
	command     func(node int, argv ...string) *exec.Cmd
	env         []string
}

// run runs the job with extra ddprun flags and environment, and returns
// every process's metrics.
func (n twoNodes) run(t *testing.T, flags []string, env ...string) []xla.Metrics {
	t.Helper()
	port, err := freeport.Pick("127.0.0.1")
	require.NoError(t, err)
	metrics := filepath.Join(t.TempDir(), "metrics.jsonl")
	start := time.Now()
	defer func() { t.Logf("%v %v took %v", flags, env, time.Since(start)) }()
	var wg sync.WaitGroup
	outs, errs := [2]string{}, [2]error{}
	for node := range 2 {
		argv := append(append([]string{filepath.Join(n.bin, "ddprun"), "--nproc_per_node=2", "--nnodes=2", fmt.Sprintf("--node_rank=%d", node),
			"--master_addr=" + n.master, fmt.Sprintf("--master_port=%d", port)}, flags...), filepath.Join(n.bin, "toy"))
		cmd := n.command(node, argv...)
		cmd.Env = append(append(slices.Clone(n.env), "XLADDP_DEVICE=neuron", xla.EnvCacheDir+"="+n.caches[node],
			xla.EnvMetricsFile+"="+metrics), env...)
		wg.Go(func() {
			b, err := cmd.CombinedOutput()
			outs[node], errs[node] = string(b), err
		})
	}
	wg.Wait()
	for node := range 2 {
		require.NoError(t, errs[node], "node %d:\n%s", node, outs[node])
	}
	raw, err := os.ReadFile(metrics)
	require.NoError(t, err)
	var all []xla.Metrics
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var m struct{ Metrics xla.Metrics }
		require.NoError(t, json.Unmarshal([]byte(line), &m))
		all = append(all, m.Metrics)
	}
	require.Len(t, all, 4, "every worker wrote its metrics")
	return all
}

// programs is the number of distinct programs in the nodes' caches.
func (n twoNodes) programs(t *testing.T) int {
	t.Helper()
	names := map[string]bool{}
	for _, dir := range n.caches {
		files, err := filepath.Glob(filepath.Join(dir, "*.xlaexec"))
		require.NoError(t, err)
		for _, f := range files {
			names[filepath.Base(f)] = true
		}
	}
	return len(names)
}

func (n *twoNodes) coldCaches(t *testing.T) {
	n.caches = [2]string{t.TempDir(), t.TempDir()}
}

func sum(ms []xla.Metrics, field func(xla.Metrics) int64) int64 {
	var s int64
	for _, m := range ms {
		s += field(m)
	}
	return s
}

func compilations(m xla.Metrics) int64 { return m.Compilations }

// checkOneCompilationPerProgram: 4 processes on 2 nodes with cold caches
// of their own compile each distinct program once job-wide (U, counted
// as the distinct programs the nodes' caches hold), where without
// sharing each node compiles it (2U); after a --compile_only pass the
// real run compiles nothing. A node's ranks share its cache: one waits
// on the cache entry's lock while the other compiles or fetches.
func checkOneCompilationPerProgram(t *testing.T, n twoNodes, unshared bool) {
	n.coldCaches(t)
	shared := n.run(t, nil)
	u := int64(n.programs(t))
	require.Positive(t, u)
	assert.Equal(t, u, sum(shared, compilations), "compilations job-wide, summed over every rank")
	assert.Equal(t, sum(shared, func(m xla.Metrics) int64 { return m.ProgramsPublished }), u)
	assert.Equal(t, u, sum(shared, func(m xla.Metrics) int64 { return m.ProgramsFetched }),
		"the other node fetches each once (its disk lock held), and its second rank loads it from that node's cache")
	assert.Equal(t, 2*u, sum(shared, func(m xla.Metrics) int64 { return m.PersistentCacheHits }), "each node's second rank")

	if unshared {
		n.coldCaches(t)
		alone := n.run(t, nil, "XLADDP_SHARE_PROGRAMS=off")
		assert.Equal(t, 2*u, sum(alone, compilations), "without sharing, each node compiles each program (its ranks share its cache)")
	}

	n.coldCaches(t)
	ahead := n.run(t, []string{"--compile_only"})
	assert.Equal(t, u, sum(ahead, compilations), "the compile-ahead pass compiles each program once")
	assert.Zero(t, sum(ahead, func(m xla.Metrics) int64 { return m.Executions }), "and executes nothing")
	real := n.run(t, nil)
	assert.Zero(t, sum(real, compilations), "--compile_only filled every node's cache")
	assert.Equal(t, 4*u, sum(real, func(m xla.Metrics) int64 { return m.PersistentCacheHits }))
}

// TestLongOneCompilationPerProgramAcrossNodes: two ddprun agents on
// loopback (make test has the exchange's own tests: go test ./xla
// ./ddp/internal/progshare).
func TestLongOneCompilationPerProgramAcrossNodes(t *testing.T) {
	n := twoNodes{bin: buildCommands(t), master: "127.0.0.1", env: standIn3Env(t),
		command: func(_ int, argv ...string) *exec.Cmd { return exec.Command(argv[0], argv[1:]...) }}
	checkOneCompilationPerProgram(t, n, false)
}

// TestLongOneCompilationPerProgramAcrossNamespaceNodes: the same on two
// hosts of their own (network namespaces, each its own address), no
// shared directory but the metrics file.
func TestLongOneCompilationPerProgramAcrossNamespaceNodes(t *testing.T) {
	h := exampletest.NewNamespaceHosts(t, 2)
	n := twoNodes{bin: buildCommands(t), master: h.Addrs[0], env: standIn3Env(t), command: h.Command}
	checkOneCompilationPerProgram(t, n, true)
}
