// Package neurontest makes the stand-ins that let the neuron target run
// on a machine without Trainium: a Python package named libneuronxla
// whose libneuronpjrt_path() names another PJRT plugin (the CPU one), and
// a neuronx-cc that does nothing. Everything else on the neuron road (the
// Python lookup, the embedded interpreter, the environment, the plugin
// load) is the real code.
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
	bin := filepath.Join(dir, "bin")
	require.NoError(t, os.MkdirAll(bin, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(bin, "neuronx-cc"), []byte("#!/bin/sh\nexit 0\n"), 0o755))
	return []string{"XLADDP_NEURON_PYTHON=" + Python(t), "PYTHONPATH=" + filepath.Join(dir, "site"),
		"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH")}
}

// StandInForCPU is StandIn naming the CPU plugin (make deps installs it),
// found the way backend.Open finds it.
func StandInForCPU(t testing.TB, dir, marker string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cpu, err := backend.Open(ctx, backend.Options{Target: backend.CPU, CPUDevices: 1})
	require.NoError(t, err, "the stand-in names the CPU plugin: run `make deps`")
	plugin := cpu.PluginPath()
	require.NoError(t, cpu.Close())
	return StandIn(t, dir, plugin, marker)
}
