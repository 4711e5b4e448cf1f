package launch

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/neuron/trn/trntest"
)

// TestDoctorReportsTheNeuronSDK: `ddprun doctor` says which libneuronxla
// it found, where, with which compiler and on which road (a Python or
// none), and finds each seeded misconfiguration of libneuronxla 3's
// layouts with what to do, within 5 s.
func TestDoctorReportsTheNeuronSDK(t *testing.T) {
	plugin, runtimeDir := trntest.PluginNeedingRuntime(t)
	for _, tc := range []struct {
		name   string
		layout trntest.Layout
		seed   func(e trntest.Env) []string
		says   []string
		clean  bool
	}{
		{name: "libneuronxla 3", layout: trntest.Layout{Libneuronxla: "3.0.2891.0", Plugin: plugin},
			says: []string{"neuron sdk: libneuronxla 3.0.2891.0", "($VIRTUAL_ENV)", "neuronx-cc 2.25.3371.0 at",
				"with no Python in the process", "no problem found"}, clean: true},
		{name: "libneuronxla 2", layout: trntest.Layout{Libneuronxla: "2.21.33.0", Plugin: plugin},
			says: []string{"neuron sdk: libneuronxla 2.21.33.0", "through an embedded Python", "no problem found"}, clean: true},
		{name: "no compiler", layout: trntest.Layout{Libneuronxla: "3.0.2891.0", Plugin: plugin, NoCompiler: true},
			says: []string{"neuronx-cc, the compiler libneuronxla runs, is not next to libneuronxla ($VIRTUAL_ENV) or on PATH", "pip install neuronx-cc"}},
		{name: "no plugin in the package", layout: trntest.Layout{Libneuronxla: "3.0.2891.0", Plugin: "-"},
			says: []string{"has no libneuronpjrt.so: a broken install", "pip install --force-reinstall libneuronxla"}},
		{name: "no runtime", layout: trntest.Layout{Libneuronxla: "3.0.2891.0", Plugin: plugin},
			seed: func(trntest.Env) []string { return []string{"LD_LIBRARY_PATH="} },
			says: []string{"needs [libnrt.so.1], which the loader does not find", "install aws-neuronx-runtime-lib"}},
		{name: "two installs", layout: trntest.Layout{Libneuronxla: "3.0.2891.0", Plugin: plugin},
			seed: func(e trntest.Env) []string {
				trntest.WriteDistInfo(t, e.Site, "libneuronxla", "2.21.33.0")
				return nil
			},
			says: []string{"holds 2 installs of libneuronxla", "pip uninstall -y libneuronxla"}},
		{name: "NEURON_LIBRARY_PATH names nothing", layout: trntest.Layout{Libneuronxla: "3.0.2891.0", Plugin: plugin},
			seed: func(trntest.Env) []string { return []string{"NEURON_LIBRARY_PATH=/nowhere/libneuronpjrt.so"} },
			says: []string{"$NEURON_LIBRARY_PATH=/nowhere/libneuronpjrt.so is not a file"}},
		{name: "too old", layout: trntest.Layout{Libneuronxla: "1.9.3", Plugin: plugin},
			says: []string{"libneuronxla 1.9.3", "is older than 2.0", "pip install -U libneuronxla"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			venv := t.TempDir()
			e := trntest.NewEnv(t, venv, tc.layout)
			environ := []string{"VIRTUAL_ENV=" + venv, "PATH=" + t.TempDir(), "HOME=" + t.TempDir(), "LD_LIBRARY_PATH=" + runtimeDir}
			if tc.seed != nil {
				environ = append(environ, tc.seed(e)...)
			}
			res := runDoctor(t, []string{"--nproc_per_node=2", "/bin/true"}, environ...)
			for _, s := range tc.says {
				assert.Contains(t, res.out, s)
			}
			assert.Equal(t, !tc.clean, res.code != 0, res.out)
			assert.Less(t, res.elapsed, seededWithin)
		})
	}
}

// TestDoctorFindsNoSDKOnTrainium: a Trainium instance with no
// libneuronxla anywhere the workers would look.
func TestDoctorFindsNoSDKOnTrainium(t *testing.T) {
	h := fakeTrainium(t, true, false)
	c, err := ParseArgs([]string{"--nproc_per_node=32", "/bin/true"}, func(string) string { return "" }, os.Stderr)
	require.NoError(t, err)
	var text []string
	for _, f := range localFindings(t.Context(), c, []string{"HOME=" + t.TempDir(), "PATH=" + t.TempDir()}, h) {
		text = append(text, f.String())
	}
	all := strings.Join(text, "\n")
	assert.Contains(t, all, "libneuronxla is in none of")
	assert.Contains(t, all, filepath.Join("/usr/lib/python3/dist-packages"))
	assert.Contains(t, all, "source /opt/aws_neuronx_venv_*/bin/activate")
}
