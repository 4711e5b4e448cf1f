package launch

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPackagesInTakesTheNewestVersion: of two installs of a plugin's
// package, the doctor reports the newer by number, where string order
// is wrong ("2.10.0" sorts before "2.9.0").
func TestPackagesInTakesTheNewestVersion(t *testing.T) {
	cases := []struct {
		name      string
		installed []string // dist-info directories, across two site-packages
		want      map[string]string
	}{
		{"minor past 9", []string{"libneuronxla-2.9.0.dist-info", "libneuronxla-2.10.0.dist-info"}, map[string]string{"libneuronxla": "2.10.0"}},
		{"patch past 9", []string{"neuronx_cc-2.15.10.0.dist-info", "neuronx_cc-2.15.9.0.dist-info"}, map[string]string{"neuronx_cc": "2.15.10.0"}},
		{"one install", []string{"jax_cuda12_pjrt-0.7.1.dist-info"}, map[string]string{"jax_cuda12_pjrt": "0.7.1"}},
		{"not a plugin", []string{"numpy-2.0.0.dist-info"}, map[string]string{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dirs := []string{t.TempDir(), t.TempDir()}
			for i, info := range c.installed {
				require.NoError(t, os.Mkdir(filepath.Join(dirs[i%2], info), 0o755))
			}
			assert.Equal(t, c.want, packagesIn(dirs))
		})
	}
}
