package trn

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/neuron/trn/trntest"
)

func writeMetadata(t *testing.T, site, dist, version, headers string) {
	t.Helper()
	info := filepath.Join(site, dist+"-"+version+".dist-info")
	require.NoError(t, os.MkdirAll(info, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(info, "METADATA"), []byte("Metadata-Version: 2.1\nName: "+dist+"\n"+headers+"\nbody\n"), 0o644))
}

// isolate points the DLAMI, HOME and PATH at empty places, so only what a
// case builds is found.
func isolate(t *testing.T) map[string]string {
	t.Helper()
	old := dlamiRoot
	dlamiRoot = t.TempDir()
	t.Cleanup(func() { dlamiRoot = old })
	t.Setenv("PATH", t.TempDir())
	return map[string]string{"HOME": t.TempDir()}
}

func TestFindSDKTakesPythonsOrder(t *testing.T) {
	env := isolate(t)
	getenv := func(k string) string { return env[k] }
	_, ok, searched, err := FindSDK(getenv)
	require.NoError(t, err)
	assert.False(t, ok, "nothing installed")
	assert.NotEmpty(t, searched)

	dlami := filepath.Join(dlamiRoot, "aws_neuronx_venv_jax_0_9")
	trntest.NewEnv(t, dlami, trntest.Layout{Libneuronxla: "3.0.3854.0"})
	sdk, ok, _, err := FindSDK(getenv)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, "3.0.3854.0", sdk.Libneuronxla)
	assert.Contains(t, sdk.Where, "DLAMI venv")
	assert.Equal(t, filepath.Join(dlami, "bin", "neuronx-cc"), sdk.Compiler)
	assert.Equal(t, "2.25.3371.0", sdk.CompilerVersion)
	assert.False(t, sdk.NeedsPython())
	assert.Contains(t, sdk.String(), "no Python")

	pythonpath := t.TempDir()
	writeMetadata(t, pythonpath, "libneuronxla", "2.2.14584.0", "Version: 2.2.14584.0\n")
	require.NoError(t, os.MkdirAll(filepath.Join(pythonpath, "libneuronxla"), 0o755))
	env["PYTHONPATH"] = pythonpath
	sdk, _, _, err = FindSDK(getenv)
	require.NoError(t, err)
	assert.Equal(t, "2.2.14584.0", sdk.Libneuronxla, "$PYTHONPATH comes before the DLAMI's venvs")
	assert.True(t, sdk.NeedsPython())
	assert.Contains(t, sdk.String(), "embedded Python")

	venv := t.TempDir()
	trntest.NewEnv(t, venv, trntest.Layout{Libneuronxla: "3.0.2891.0"})
	env["VIRTUAL_ENV"] = venv
	sdk, _, _, err = FindSDK(getenv)
	require.NoError(t, err)
	assert.Equal(t, "3.0.2891.0", sdk.Libneuronxla, "the active virtualenv comes first")
	assert.Equal(t, "$VIRTUAL_ENV", sdk.Where)

	chosen := t.TempDir()
	trntest.NewEnv(t, chosen, trntest.Layout{NoCompiler: true})
	env["XLADDP_NEURON_PYTHON"] = filepath.Join(chosen, "bin", "python3")
	sdk, _, _, err = FindSDK(getenv)
	require.NoError(t, err)
	assert.Empty(t, sdk.Libneuronxla, "no dist-info: the version is for its Python to tell")
	assert.True(t, sdk.NeedsPython())
	assert.Empty(t, sdk.Compiler, "neither in its bin/ nor on PATH")

	env["NEURON_LIBRARY_PATH"] = "/elsewhere/libneuronpjrt.so"
	sdk, _, _, err = FindSDK(getenv)
	require.NoError(t, err)
	assert.Equal(t, "/elsewhere/libneuronpjrt.so", sdk.Plugin)
}

// TestFindSDKRefusesBrokenInstalls: a package whose files lie or
// disagree is an error naming the fix, never a guess.
func TestFindSDKRefusesBrokenInstalls(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, site string)
		want  string
	}{
		{"two installs", func(t *testing.T, site string) {
			writeMetadata(t, site, "libneuronxla", "2.2.1", "Version: 2.2.1\n")
			writeMetadata(t, site, "libneuronxla", "3.0.1", "Version: 3.0.1\n")
		}, "2 installs of libneuronxla"},
		{"no METADATA", func(t *testing.T, site string) {
			require.NoError(t, os.MkdirAll(filepath.Join(site, "libneuronxla-3.0.1.dist-info"), 0o755))
		}, "reinstall libneuronxla"},
		{"not a version", func(t *testing.T, site string) {
			writeMetadata(t, site, "libneuronxla", "3.0.1", "Version: $(rm -rf /)\n")
		}, "not a version"},
		{"no version in a huge header", func(t *testing.T, site string) {
			writeMetadata(t, site, "libneuronxla", "3.0.1", strings.Repeat("Classifier: x\n", 1<<16))
		}, "names no Version in its first 64 KiB"},
		// Its open would wait for a writer: ddprun doctor hung for good.
		{"METADATA a FIFO", func(t *testing.T, site string) {
			info := filepath.Join(site, "libneuronxla-3.0.1.dist-info")
			require.NoError(t, os.MkdirAll(info, 0o755))
			require.NoError(t, syscall.Mkfifo(filepath.Join(info, "METADATA"), 0o644))
		}, "METADATA is a FIFO, not a regular file"},
		{"a broken neuronx_cc", func(t *testing.T, site string) {
			writeMetadata(t, site, "libneuronxla", "3.0.1", "Version: 3.0.1\n")
			writeMetadata(t, site, "neuronx_cc", "2.1", "Summary: none\n")
		}, "reinstall neuronx-cc"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := isolate(t)
			venv := t.TempDir()
			site := filepath.Join(venv, "lib", "python3.12", "site-packages")
			require.NoError(t, os.MkdirAll(filepath.Join(site, "libneuronxla"), 0o755))
			c.setup(t, site)
			env["VIRTUAL_ENV"] = venv
			_, ok, _, err := FindSDK(func(k string) string { return env[k] })
			assert.True(t, ok)
			assert.ErrorContains(t, err, c.want)
		})
	}
}

func TestSDKProblemsNameTheFix(t *testing.T) {
	plugin, runtimeDir := trntest.PluginNeedingRuntime(t)
	compiler := filepath.Join(t.TempDir(), "neuronx-cc")
	good := SDK{Libneuronxla: "3.0.2891.0", Where: "$VIRTUAL_ENV", SitePackages: "/venv/lib/python3.11/site-packages", Plugin: plugin, Compiler: compiler}
	withRuntime := func(k string) string {
		if k == "LD_LIBRARY_PATH" {
			return "/nowhere:" + runtimeDir
		}
		return ""
	}
	assert.Empty(t, good.Problems(withRuntime))
	cases := []struct {
		name   string
		mutate func(s *SDK)
		getenv func(string) string
		want   string
	}{
		{"the runtime is not installed", func(*SDK) {}, func(string) string { return "" }, "install aws-neuronx-runtime-lib"},
		{"no plugin in the package", func(s *SDK) { s.Plugin = "/venv/nothing.so" }, withRuntime, "pip install --force-reinstall libneuronxla"},
		{"NEURON_LIBRARY_PATH names nothing", func(s *SDK) { s.Plugin = "/venv/nothing.so" },
			func(k string) string { return map[string]string{"NEURON_LIBRARY_PATH": "/venv/nothing.so"}[k] }, "$NEURON_LIBRARY_PATH=/venv/nothing.so is not a file"},
		{"older than 2.0", func(s *SDK) { s.Libneuronxla = "1.9.3" }, withRuntime, "pip install -U libneuronxla"},
		{"no compiler", func(s *SDK) { s.Compiler = "" }, withRuntime, "pip install neuronx-cc in the Python whose site-packages are /venv/lib/python3.11/site-packages"},
		{"the plugin is not a library", func(s *SDK) { s.Plugin = compiler }, withRuntime, "not a shared library"},
	}
	require.NoError(t, os.WriteFile(compiler, []byte("#!/bin/sh\n"), 0o755))
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := good
			c.mutate(&s)
			problems := s.Problems(c.getenv)
			require.NotEmpty(t, problems)
			assert.Contains(t, problems[0].String(), c.want)
		})
	}
}

func TestVersionLess(t *testing.T) {
	for _, c := range []struct {
		a, b string
		less bool
	}{
		{"2.9.1", "2.10", true}, {"2.10", "2.9", false}, {"3.0.2891.0", "3.0.10000.0", true},
		{"3.0.0rc1", "3.0.1", true}, {"2.0", "2.0.0", false}, {"1.9.3", "2.0", true},
	} {
		assert.Equal(t, c.less, VersionLess(c.a, c.b), "%s < %s", c.a, c.b)
	}
}
