package backend

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCacheIdentityCoversThePluginFileAndVersions: the identity follows
// the plugin file's size, not only the pieces pluginDigest samples, and
// the versions the plugin reports. A plugin grown by one byte whose
// sampled pieces read the same, or one that reports another platform or
// PJRT C API version, caches its programs apart; the same plugin at
// another path shares them.
func TestCacheIdentityCoversThePluginFileAndVersions(t *testing.T) {
	write := func(b []byte) string {
		p := filepath.Join(t.TempDir(), "pjrt_c_api_cpu_plugin.so")
		require.NoError(t, os.WriteFile(p, b, 0o644))
		return p
	}
	// Zeros throughout: every sampled piece reads the same bytes,
	// whatever the file's size.
	zeros := make([]byte, 3<<20)
	plugin := write(zeros)
	identity := func(path, platform string, major, minor int) string {
		b := &Backend{target: CPU, pluginPath: path, compiler: "xla", devices: make([]Device, 2)}
		return b.identityOf(platform, major, minor)
	}
	want := identity(plugin, "cpu 0.5.1", 0, 115)
	for _, tc := range []struct {
		name         string
		path         string
		platform     string
		major, minor int
		same         bool
	}{
		{"identical", plugin, "cpu 0.5.1", 0, 115, true},
		{"the same bytes at another path", write(zeros), "cpu 0.5.1", 0, 115, true},
		{"grown by one byte, its sampled pieces the same", write(append(zeros, 0)), "cpu 0.5.1", 0, 115, false},
		{"another platform version", plugin, "cpu 0.5.2", 0, 115, false},
		{"another PJRT C API minor version", plugin, "cpu 0.5.1", 0, 116, false},
		{"another PJRT C API major version", plugin, "cpu 0.5.1", 1, 115, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := identity(tc.path, tc.platform, tc.major, tc.minor)
			if tc.same {
				assert.Equal(t, want, got)
			} else {
				assert.NotEqual(t, want, got)
			}
		})
	}
}
