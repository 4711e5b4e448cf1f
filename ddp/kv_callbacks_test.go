package ddp_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/ddp/internal/ddptest"
	"github.com/xladdp/xladdp/ddp/internal/pjrtkv"
)

func init() { ddptest.Scenarios["kv-standin"] = kvStandinScenario }

// kvStandinScenario joins the job and opens the stand-in plugin through
// ddp.Spawn, as a program under a launcher does; with
// $XLADDP_KV_STANDIN_FORGED, rank 2 first writes "standin/forged" to the
// job's store by hand, sealed with a token the job does not have, as a
// hostile peer would.
func kvStandinScenario(rep *ddptest.Report) {
	ctx := context.Background()
	if err := dist.Init(ctx, ddptest.WorkerOptions()); err != nil {
		rep.Error = err.Error()
		return
	}
	defer func() { _ = dist.Destroy() }()
	g := dist.Current()
	if g.Rank() == 2 && os.Getenv("XLADDP_KV_STANDIN_FORGED") != "" {
		forger := pjrtkv.New(g.Store(), "", 0, "not the job's token")
		if err := forger.Put(ctx, "standin/forged", []byte("forged")); err != nil {
			rep.Error = err.Error()
			return
		}
	}
	err := ddp.Spawn(ctx, func(ctx context.Context, w ddp.Worker) error {
		return w.Device.MarkStep(ctx)
	}, ddp.SpawnOptions{Devices: 1, Device: backend.Options{Target: backend.CPU, PluginPath: os.Getenv("XLADDP_KV_STANDIN_PLUGIN")}})
	rep.Error = ddptest.ErrorText(err)
}

// buildKVStandin compiles testdata/kvstandin.c against the PJRT header
// the callbacks are built with.
func buildKVStandin(t *testing.T) string {
	t.Helper()
	so := filepath.Join(t.TempDir(), "pjrt_c_api_cpu_kvstandin_plugin.so")
	out, err := exec.Command("cc", "-shared", "-fPIC", "-Wall", "-I", filepath.Join("..", "backend", "internal", "pjrtx"),
		"-o", so, filepath.Join("testdata", "kvstandin.c"), "-ldl").CombinedOutput()
	require.NoError(t, err, "%s", out)
	return so
}

// TestKeyValueCallbacksServeTheJob: in a job of 3 processes, the plugin
// (a stand-in that records its calls) gets PJRT_Client_Create's
// key-value callbacks in every process, served from the job's store:
// each process's put is seen by every process's get, a try-get of a
// missing key says not found, an oversized put, an empty key and one
// over 4 KiB are refused, and a value a hostile peer wrote by hand is
// refused by name; every process then
// opens its client and runs.
func TestKeyValueCallbacksServeTheJob(t *testing.T) {
	home, err := os.UserHomeDir()
	require.NoError(t, err)
	real := filepath.Join(home, ".local", "lib", "go-xla", "pjrt_c_api_cpu_plugin.so")
	record := filepath.Join(t.TempDir(), "calls")
	cmds, outs := ddptest.Launch(t, "kv-standin", 3, "XLADDP_TEST_TIMEOUT=60s", "XLADDP_KV_STANDIN_PLUGIN="+buildKVStandin(t),
		"XLADDP_KV_STANDIN_REAL="+real, "XLADDP_KV_STANDIN_RECORD="+record, "XLADDP_KV_STANDIN_FORGED=1", "XLADDP_CACHE_DIR=off")
	for r, rep := range ddptest.WaitReports(t, cmds, outs) {
		assert.Empty(t, rep.Error, "rank %d", r)
	}
	raw, err := os.ReadFile(record)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	sort.Strings(lines)
	var want []string
	for r := range 3 {
		want = append(want, fmt.Sprintf("rank %d: put standin/%d: ok ", r, r))
		for p := range 3 {
			want = append(want, fmt.Sprintf("rank %d: get standin/%d: ok from rank %d", r, p, p))
		}
	}
	for _, w := range want {
		assert.Contains(t, lines, w)
	}
	for r := range 3 {
		rank := fmt.Sprintf("rank %d: ", r)
		assert.Contains(t, lines, rank+`try-get standin/missing: error 5 pjrtx: key-value try-get "standin/missing": not found`)
		assert.Regexp(t, regexp.MustCompile(`(?m)^`+rank+`put standin/big: error \d+ pjrtx: key-value put "standin/big" .*9437184 bytes for "standin/big", over 8388608`), string(raw))
		assert.Regexp(t, regexp.MustCompile(`(?m)^`+rank+`get standin/forged: error \d+ pjrtx: key-value get "standin/forged" .*sealed for another key, attempt or job`), string(raw))
	}
	for r := range 3 {
		for _, key := range []string{"", "long"} {
			assert.Contains(t, lines, fmt.Sprintf("rank %d: try-get %s: error 3 pjrtx: key-value callback: key empty or over 4096 bytes", r, key))
		}
	}
	assert.Len(t, lines, 3*9, "%s", raw)
}
