package archtest

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

// root is the repository's root, from this package's directory.
const root = "../.."

// module is the module path.
const module = "github.com/xladdp/xladdp"

// deps lists the packages pkg links (go list -deps), tags applied.
func deps(t *testing.T, pkg string, tags ...string) []string {
	t.Helper()
	args := []string{"list", "-deps"}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	out, err := exec.Command("go", append(args, pkg)...).Output()
	require.NoError(t, err, "go list -deps %s", pkg)
	return strings.Fields(string(out))
}

// nonTestSources walks the repository's Go files that are not tests.
func nonTestSources(t *testing.T, visit func(path string, src string)) {
	t.Helper()
	sources(t, false, visit)
}

// sources walks the repository's Go files, the tests too with tests.
func sources(t *testing.T, tests bool, visit func(path string, src string)) {
	t.Helper()
	require.NoError(t, filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") && path != root || d.Name() == "bin") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || !tests && strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		visit(filepath.ToSlash(strings.TrimPrefix(path, root+"/")), string(b))
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
		"XLADDP_BIND_CPUS", "XLADDP_COMPILE_ONLY", "XLADDP_TIMEOUT", "XLADDP_REGROUP_DIR"}
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
	linked := deps(t, module+"/ddp/dist")
	for _, heavy := range []string{module + "/backend", module + "/xla"} {
		assert.NotContains(t, linked, heavy)
	}
	assert.Contains(t, linked, module+"/ddp/internal/tcp", "the default transport is linked")
}

// TestDDPRootIsTheUserLayer: the ddp package stays the layer users call
// (Wrap, the sampler, the mode, Run), at most 2,000 non-test lines: the
// crossings, the canonical sums and the training loop live apart.
func TestDDPRootIsTheUserLayer(t *testing.T) {
	lines := 0
	nonTestSources(t, func(path, src string) {
		if filepath.Dir(path) == "ddp" {
			lines += strings.Count(src, "\n")
		}
	})
	assert.Positive(t, lines)
	assert.LessOrEqual(t, lines, 2000)
}

// TestEngineChoosesNoTarget: the engine (xla) links no target, so no
// program on it is made to link Trainium's cgo bootstrap; ddp (whose
// Flags own --device) links every target, and -tags noneuron leaves
// neuron out of it.
func TestEngineChoosesNoTarget(t *testing.T) {
	assert.NotContains(t, deps(t, module+"/xla"), module+"/neuron")
	assert.NotContains(t, deps(t, module+"/xla"), module+"/targets")
	assert.Contains(t, deps(t, module+"/ddp"), module+"/neuron")
	assert.NotContains(t, deps(t, module+"/ddp", "noneuron"), module+"/neuron")
}

// TestLauncherKnowsTrainiumWithoutCgo: the launcher (ddp/launch and
// ddprun) takes Trainium's facts from the pure-Go neuron/trn, never from
// neuron (cgo); ddp does not import the launcher.
func TestLauncherKnowsTrainiumWithoutCgo(t *testing.T) {
	for _, pkg := range []string{module + "/ddp/launch", module + "/cmd/ddprun"} {
		linked := deps(t, pkg)
		assert.Contains(t, linked, module+"/neuron/trn", pkg)
		assert.NotContains(t, linked, module+"/neuron", pkg)
		// The launcher supervises workers; it carries no collectives and
		// shares no programs (the fleet simulator that did is fleetsim).
		assert.NotContains(t, linked, module+"/ddp/internal/tcp", pkg)
		assert.NotContains(t, linked, module+"/ddp/internal/progshare", pkg)
	}
	assert.NotContains(t, deps(t, module+"/ddp"), module+"/ddp/launch")
	out, err := exec.Command("go", "list", "-f", `{{join .Deps "\n"}}`, module+"/neuron/trn").Output()
	require.NoError(t, err)
	assert.NotContains(t, strings.Fields(string(out)), "runtime/cgo", "neuron/trn is pure Go")
}

// TestTrainiumNamesLiveInTrn: the Neuron runtime's, plugin's and EFA's
// variables (NEURON_*, NEURONCORE_*, FI_*) are spelled in neuron/trn's
// names.go only; no code outside the Trainium packages (neuron/...)
// mentions NEURON_ at all.
func TestTrainiumNamesLiveInTrn(t *testing.T) {
	quoted := regexp.MustCompile(`"(NEURON_|NEURONCORE_|FI_)[A-Z_]+`)
	nonTestSources(t, func(path, src string) {
		if quoted.MatchString(src) {
			assert.Equal(t, "neuron/trn/names.go", path, "%s spells a Neuron variable: use neuron/trn's constant", path)
		}
		// The knob table holds docs/architecture.md's rows, whose
		// meanings may name a Neuron variable; our own knobs named for Neuron
		// are ours.
		if !strings.HasPrefix(path, "neuron/") && path != "internal/knobs/table.go" {
			ours := "XLADDP" + "_NEURON_" // split, or the knob scan below reads it as a variable
			assert.NotContains(t, strings.ReplaceAll(src, ours, ""), "NEURON_", "%s: Trainium's facts are neuron/trn's", path)
		}
	})
}

// TestCommandsLiveUnderCmd: every command is under cmd/ or is an example
// (examples/...); no library folder holds one.
func TestCommandsLiveUnderCmd(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{if eq .Name "main"}}{{.ImportPath}}{{end}}`, module+"/...").Output()
	require.NoError(t, err)
	commands := strings.Fields(string(out))
	assert.Contains(t, commands, module+"/cmd/ddprun")
	for _, c := range commands {
		rel := strings.TrimPrefix(c, module+"/")
		assert.True(t, strings.HasPrefix(rel, "cmd/") || strings.HasPrefix(rel, "examples/"), "%s: put commands under cmd/", rel)
	}
}

// TestArchitectureMapIsComplete: docs/architecture.md names every
// package (the examples' under their row) and every XLADDP_* variable
// the code or its tests read.
func TestArchitectureMapIsComplete(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(root, "docs/architecture.md"))
	require.NoError(t, err)
	out, err := exec.Command("go", "list", module+"/...").Output()
	require.NoError(t, err)
	for _, pkg := range strings.Fields(string(out)) {
		rel := strings.TrimPrefix(pkg, module+"/")
		if strings.HasPrefix(rel, "examples/") {
			continue
		}
		assert.Contains(t, string(doc), "`"+rel+"`", "docs/architecture.md does not name package %s", rel)
	}
	knob := regexp.MustCompile(`XLADDP_[A-Z0-9_]*[A-Z0-9]`)
	sources(t, true, func(path, src string) {
		for _, k := range knob.FindAllString(src, -1) {
			assert.Contains(t, string(doc), "`"+k+"`", "%s reads %s: add it to docs/architecture.md's knobs", path, k)
		}
	})
}

// TestOneAgentLoop: ddprun's restart and preemption policy is written
// once (the agent's loop over a workerStarter: its own workers or
// mpirun's), and a single node is a meeting of its own, not a nil
// rendezvous checked at every step.
func TestOneAgentLoop(t *testing.T) {
	var restarts, preempts []string
	nonTestSources(t, func(path, src string) {
		if !strings.HasPrefix(path, "ddp/launch/") {
			return
		}
		if strings.Contains(src, "restarting (restart %d of %d)") {
			restarts = append(restarts, path)
		}
		if strings.Contains(src, "run the same command again to resume") {
			preempts = append(preempts, path)
		}
	})
	assert.Equal(t, []string{"ddp/launch/agent.go"}, restarts, "the restart policy")
	assert.Equal(t, []string{"ddp/launch/agent.go"}, preempts, "the preemption policy")
}
