package pjrtx

import (
	"os"
	"path/filepath"
	"testing"

	gomlxxla "github.com/gomlx/go-xla/compute/xla"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// installedCPUPlugin is where `make deps` puts the CPU plugin.
func installedCPUPlugin(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("XLADDP_PJRT_PLUGIN"); p != "" {
		return p
	}
	home, err := os.UserHomeDir()
	require.NoError(t, err)
	return filepath.Join(home, ".local", "lib", "go-xla", "pjrt_c_api_cpu_plugin.so")
}

// TestReachesUnexportedFields pins the two unexported fields this package
// reads (GoMLX's xla.Backend.client, go-xla's pjrt.Device.cDevice) against
// the real plugin: an upgrade that renames either fails here.
func TestReachesUnexportedFields(t *testing.T) {
	path := installedCPUPlugin(t)
	major, minor, err := ProbeAPI(path)
	require.NoError(t, err, "the CPU plugin must be installed: run `make deps`")
	assert.Equal(t, HeaderMajor, major)
	assert.Positive(t, minor)

	gomlxxla.EnableAutoInstall(false)
	b, err := gomlxxla.NewWithOptions(path, map[string]any{"cpu_device_count": int64(3)})
	require.NoError(t, err)
	defer b.Finalize()

	client, err := ClientOf(b)
	require.NoError(t, err)
	require.Equal(t, 3, client.NumDevices())
	infos, err := Describe(path, client.AddressableDevices())
	require.NoError(t, err)
	assert.Equal(t, []DeviceInfo{{0, "cpu"}, {1, "cpu"}, {2, "cpu"}}, infos)
}

func TestErrors(t *testing.T) {
	_, err := ClientOf(nil)
	assert.ErrorContains(t, err, "nil GoMLX XLA backend")

	_, err = Describe("/nonexistent/plugin.so", nil)
	assert.ErrorContains(t, err, "reading the PJRT API table of /nonexistent/plugin.so")

	text := filepath.Join(t.TempDir(), "text.so")
	require.NoError(t, os.WriteFile(text, []byte("text"), 0o644))
	_, _, err = ProbeAPI(text)
	assert.ErrorContains(t, err, "loading "+text)
}
