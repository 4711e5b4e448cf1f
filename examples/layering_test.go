package examples

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// nonTestSources walks the repository's Go files that are not tests.
func nonTestSources(t *testing.T, visit func(path string, src string)) {
	t.Helper()
	require.NoError(t, filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") && path != "..") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		visit(filepath.ToSlash(strings.TrimPrefix(path, "../")), string(b))
		return nil
	}))
}

// TestFilesStaySmall: no non-test file over 450 lines.
func TestFilesStaySmall(t *testing.T) {
	nonTestSources(t, func(path, src string) {
		assert.LessOrEqual(t, strings.Count(src, "\n"), 450, "%s: split it by what it holds", path)
	})
}

// TestWorkerVariablesSpelledOnce: the worker environment's variables are
// spelled in package internal/workerenv only; everything else names them
// through it.
func TestWorkerVariablesSpelledOnce(t *testing.T) {
	names := []string{"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME",
		"ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
		"TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
		"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "XLADDP_SPAWN_CHILD", "XLADDP_BACKEND",
		"XLADDP_BIND_CPUS", "XLADDP_COMPILE_ONLY"}
	spelled := map[string][]string{}
	for _, n := range names {
		re := regexp.MustCompile(`"` + n + `[="]`)
		nonTestSources(t, func(path, src string) {
			if re.MatchString(src) {
				spelled[n] = append(spelled[n], path)
			}
		})
	}
	for _, n := range names {
		assert.Equal(t, []string{"internal/workerenv/names.go"}, spelled[n], "%q", n)
	}
}

// TestBackendKnowsNoTarget: package backend and its commands hold no
// Neuron-specific code (neuron registers itself), and xladevices links
// the default set rather than neuron directly.
func TestBackendKnowsNoTarget(t *testing.T) {
	neuron := regexp.MustCompile(`(?i)neuron`)
	nonTestSources(t, func(path, src string) {
		if strings.HasPrefix(path, "backend/") {
			assert.False(t, neuron.MatchString(src), "%s names neuron", path)
		}
	})
	out, err := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, "github.com/xladdp/xladdp/cmd/xladevices").Output()
	require.NoError(t, err)
	imports := strings.Fields(string(out))
	assert.NotContains(t, imports, "github.com/xladdp/xladdp/neuron")
	assert.Contains(t, imports, "github.com/xladdp/xladdp/targets")
}

// TestProcessGroupCoreLinksNoPJRT: ddp's core, the process group and its
// transports, links neither PJRT (backend) nor the lazy tensors (xla).
func TestProcessGroupCoreLinksNoPJRT(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/xladdp/xladdp/ddp/dist").Output()
	require.NoError(t, err)
	deps := strings.Fields(string(out))
	for _, heavy := range []string{"github.com/xladdp/xladdp/backend", "github.com/xladdp/xladdp/xla"} {
		assert.NotContains(t, deps, heavy)
	}
	assert.Contains(t, deps, "github.com/xladdp/xladdp/ddp/internal/tcp", "the default transport is linked")
}

// TestDDPRootIsTheUserLayer: the ddp package stays the layer users call
// (Wrap, the sampler, checkpoints, Run), at most 2,500 non-test lines.
func TestDDPRootIsTheUserLayer(t *testing.T) {
	lines := 0
	nonTestSources(t, func(path, src string) {
		if filepath.Dir(path) == "ddp" {
			lines += strings.Count(src, "\n")
		}
	})
	assert.Positive(t, lines)
	assert.LessOrEqual(t, lines, 2500)
}
