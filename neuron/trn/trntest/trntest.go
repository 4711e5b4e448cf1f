// Package trntest writes the Neuron SDK's install layouts for tests, in
// pure Go (the launcher's tests use it, and they link no cgo): a Python
// environment with libneuronxla's and neuronx_cc's dist-info as pip
// leaves them, neuronx-cc in its bin/, and a shared library that needs
// the Neuron runtime as the real plugin does.
//
// It knows nothing of PJRT: package neurontest puts a real plugin in
// these layouts.
package trntest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// Env is a Python environment (a venv) a test built.
type Env struct {
	Root, Site string
}

// Plugin is where libneuronxla's plugin lies in it.
func (e Env) Plugin() string { return filepath.Join(e.Site, "libneuronxla", "libneuronpjrt.so") }

// Layout says what NewEnv installs.
type Layout struct {
	// Libneuronxla is the version its dist-info gives ("": none, as a
	// package put on PYTHONPATH by hand).
	Libneuronxla string
	// Plugin is linked as libneuronpjrt.so ("": an empty file; "-": no
	// plugin at all, a broken install).
	Plugin string
	// NoCompiler leaves neuronx-cc out of bin/.
	NoCompiler bool
}

// NewEnv installs l as a venv at root (lib/python3.11/site-packages, bin/).
func NewEnv(t testing.TB, root string, l Layout) Env {
	t.Helper()
	e := Env{Root: root, Site: filepath.Join(root, "lib", "python3.11", "site-packages")}
	require.NoError(t, os.MkdirAll(filepath.Join(e.Site, "libneuronxla"), 0o755))
	switch l.Plugin {
	case "-":
	case "":
		require.NoError(t, os.WriteFile(e.Plugin(), nil, 0o755))
	default:
		require.NoError(t, os.Symlink(l.Plugin, e.Plugin()))
	}
	if l.Libneuronxla != "" {
		WriteDistInfo(t, e.Site, "libneuronxla", l.Libneuronxla)
		WriteDistInfo(t, e.Site, "neuronx_cc", "2.25.3371.0")
	}
	if !l.NoCompiler {
		WriteCompiler(t, filepath.Join(root, "bin"))
	}
	return e
}

// WriteDistInfo writes the dist-info pip leaves for dist at version.
func WriteDistInfo(t testing.TB, site, dist, version string) {
	t.Helper()
	info := filepath.Join(site, dist+"-"+version+".dist-info")
	require.NoError(t, os.MkdirAll(info, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(info, "METADATA"), []byte(
		"Metadata-Version: 2.1\nName: "+dist+"\nVersion: "+version+"\nSummary: stand-in\n\nA stand-in.\n"), 0o644))
}

// WriteCompiler writes a neuronx-cc that does nothing into bin.
func WriteCompiler(t testing.TB, bin string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(bin, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(bin, "neuronx-cc"), []byte("#!/bin/sh\nexit 0\n"), 0o755))
}

// PluginNeedingRuntime builds, with gcc, a shared library that needs
// libnrt.so.1 as libneuronpjrt.so does, and that libnrt.so.1 in
// runtimeDir (on no search path: the loader finds it only when told).
func PluginNeedingRuntime(t testing.TB) (plugin, runtimeDir string) {
	t.Helper()
	_, err := exec.LookPath("gcc")
	require.NoError(t, err, "gcc builds the library under test (cgo needs it for this module anyway): apt-get install gcc")
	dir, runtimeDir := t.TempDir(), t.TempDir()
	src := filepath.Join(dir, "x.c")
	require.NoError(t, os.WriteFile(src, []byte("int nrt_init(void) { return 0; }\n"), 0o644))
	out, err := exec.Command("gcc", "-shared", "-fPIC", "-Wl,-soname,libnrt.so.1", "-o", filepath.Join(runtimeDir, "libnrt.so.1"), src).CombinedOutput()
	require.NoError(t, err, "%s", out)
	plugin = filepath.Join(dir, "libneuronpjrt.so")
	require.NoError(t, os.WriteFile(src, []byte("int nrt_init(void);\nint GetPjrtApi(void) { return nrt_init(); }\n"), 0o644))
	out, err = exec.Command("gcc", "-shared", "-fPIC", "-o", plugin, src, "-L"+runtimeDir, "-l:libnrt.so.1").CombinedOutput()
	require.NoError(t, err, "%s", out)
	return plugin, runtimeDir
}
