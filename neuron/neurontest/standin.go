// Package neurontest makes the stand-ins that let the neuron target run
// on a machine without Trainium, one for each road the bootstrap takes:
// libneuronxla 2.x (StandIn: a Python package whose libneuronpjrt_path()
// names another PJRT plugin, the CPU one) and libneuronxla 3.x (StandIn3:
// a virtualenv's site-packages holding libneuronxla's dist-info and that
// plugin as libneuronpjrt.so, with no Python that could import it), each
// with a neuronx-cc that does nothing. Everything else on the neuron road
// (the search, the embedded interpreter or its absence, the environment,
// the plugin load) is the real code.
package neurontest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/neuron/trn/trntest"
)

// Python is the interpreter the stand-in runs on: Debian's (make deps
// installs its shared libpython), else python3 on PATH.
func Python(t testing.TB) string {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		return "/usr/bin/python3"
	}
	p, err := exec.LookPath("python3")
	require.NoError(t, err, "the stand-in needs a python3 with a shared libpython (make deps)")
	return p
}

// StandIn writes the stand-ins under dir and returns the environment
// (KEY=VALUE) that points the bootstrap at them: libneuronxla version
// 2.99.0 naming plugin, and a neuronx-cc first on PATH. When imported,
// the package appends a line to marker (if not ""): the importing
// process's id and command name (python3 for the bootstrap's probe, the
// program's own for its embedded interpreter).
func StandIn(t testing.TB, dir, plugin, marker string) []string {
	t.Helper()
	pkg := filepath.Join(dir, "site", "libneuronxla")
	require.NoError(t, os.MkdirAll(pkg, 0o755))
	init := "__version__ = '2.99.0'\n"
	if marker != "" {
		init = "import os\n" + init + "with open(" + strconv.Quote(marker) + ", 'a') as f:\n" +
			"    f.write('%d %s\\n' % (os.getpid(), open('/proc/self/comm').read().strip()))\n"
	}
	require.NoError(t, os.WriteFile(filepath.Join(pkg, "__init__.py"), []byte(init), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(pkg, "libneuronpjrt_path.py"), []byte(
		"def libneuronpjrt_path():\n    return "+strconv.Quote(plugin)+"\n"), 0o644))
	trntest.WriteDistInfo(t, filepath.Join(dir, "site"), "libneuronxla", "2.99.0")
	bin := filepath.Join(dir, "bin")
	trntest.WriteCompiler(t, bin)
	return []string{"XLADDP_NEURON_PYTHON=" + Python(t), "PYTHONPATH=" + filepath.Join(dir, "site"),
		"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH")}
}

// StandInForCPU is StandIn naming the CPU plugin.
func StandInForCPU(t testing.TB, dir, marker string) []string {
	t.Helper()
	return StandIn(t, dir, CPUPlugin(t), marker)
}

// SDK3Version is the libneuronxla version StandIn3 installs: the first
// without Python (Neuron SDK 2.30).
const SDK3Version = "3.0.2891.0"

// StandIn3 installs libneuronxla 3's layout under dir, a virtualenv as pip
// leaves it: lib/python3.11/site-packages/libneuronxla/libneuronpjrt.so
// (a link to plugin) beside libneuronxla's and neuronx_cc's dist-info,
// and bin/neuronx-cc. Nothing there is importable Python and the venv has
// no interpreter. It returns the environment of an activated venv.
func StandIn3(t testing.TB, dir, plugin string) []string {
	t.Helper()
	trntest.NewEnv(t, dir, trntest.Layout{Libneuronxla: SDK3Version, Plugin: plugin})
	return []string{"VIRTUAL_ENV=" + dir, "PATH=" + filepath.Join(dir, "bin") + string(os.PathListSeparator) + os.Getenv("PATH")}
}

// StandIn3ForCPU is StandIn3 naming the CPU plugin.
func StandIn3ForCPU(t testing.TB, dir string) []string {
	t.Helper()
	return StandIn3(t, dir, CPUPlugin(t))
}

// CPUPlugin is the CPU plugin's path, found the way backend.Open finds it
// (make deps installs it).
func CPUPlugin(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cpu, err := backend.Open(ctx, backend.Options{Target: backend.CPU, CPUDevices: 1})
	require.NoError(t, err, "the stand-in names the CPU plugin: run `make deps`")
	plugin := cpu.PluginPath()
	require.NoError(t, cpu.Close())
	return plugin
}
