package backend

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestValidatePlugin(t *testing.T) {
	dir := t.TempDir()
	nilAPI := buildSharedLibrary(t, dir, "pjrt_c_api_fake_plugin.so", fakePluginNilAPI)
	plain := buildSharedLibrary(t, dir, "libplain.so", plainLibrary)
	text := filepath.Join(dir, "notes.so")
	require.NoError(t, os.WriteFile(text, []byte("not a library"), 0o644))

	// The same library with e_machine (offset 18) set to AArch64 (183).
	foreign := filepath.Join(dir, "foreign.so")
	data, err := os.ReadFile(nilAPI)
	require.NoError(t, err)
	data[18], data[19] = 183, 0
	require.NoError(t, os.WriteFile(foreign, data, 0o644))

	tests := []struct {
		name    string
		path    string
		wantErr string
	}{
		{"exports GetPjrtApi", nilAPI, ""},
		{"plain library", plain, "does not export GetPjrtApi: it is not a PJRT plugin"},
		{"text file", text, "is not an ELF shared library"},
		{"other architecture", foreign, "is built for EM_AARCH64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := validatePlugin(tt.path)
			if tt.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrNotPlugin)
			assert.Contains(t, err.Error(), tt.wantErr)
		})
	}
}

func TestLocatePluginOrder(t *testing.T) {
	clearTargetEnv(t)
	searchDir := t.TempDir()
	searched := buildSharedLibrary(t, searchDir, "pjrt_c_api_cpu_plugin.so", fakePluginNilAPI)
	fromEnv := buildSharedLibrary(t, t.TempDir(), "env.so", fakePluginNilAPI)
	explicit := buildSharedLibrary(t, t.TempDir(), "explicit.so", fakePluginNilAPI)
	t.Setenv(envGoXLAPluginPaths, searchDir)
	spec := mustSpec(t, CPU)

	tests := []struct {
		name       string
		env        string
		explicit   string
		wantPath   string
		wantSource string
	}{
		{"search of PJRT_PLUGIN_LIBRARY_PATH", "", "", searched, "search"},
		{"env beats search", fromEnv, "", fromEnv, "$" + EnvPluginPath},
		{"option beats env", fromEnv, explicit, explicit, "option"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(EnvPluginPath, tt.env)
			path, source, err := locatePlugin(context.Background(), spec, tt.explicit)
			require.NoError(t, err)
			assert.Equal(t, tt.wantPath, path)
			assert.Equal(t, tt.wantSource, source)
		})
	}
}

func TestLocatePluginNotFound(t *testing.T) {
	clearTargetEnv(t)
	empty := t.TempDir()
	t.Setenv(envGoXLAPluginPaths, empty)
	t.Setenv(EnvPython, filepath.Join(empty, "no-python"))

	tests := []struct {
		name    string
		target  Target
		wantErr []string
	}{
		{"cpu says make deps", CPU, []string{
			filepath.Join(empty, "pjrt_c_api_cpu_plugin.so"), "make deps", "lammps-jax-pjrt-cpu", EnvPluginPath}},
		{"cuda says pip install", CUDA, []string{
			filepath.Join(empty, "pjrt_c_api_cuda_plugin.so"), "jax-cuda12-pjrt", "no-python", EnvPython}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := locatePlugin(context.Background(), mustSpec(t, tt.target), "")
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrPluginNotFound)
			for _, want := range tt.wantErr {
				assert.Contains(t, err.Error(), want)
			}
		})
	}
}

// TestLocateCUDAPluginInSitePackages finds JAX's CUDA plugin the way it is
// laid out by pip (site-packages/jax_plugins/xla_cuda1N/), through a real
// python3 whose sys.path includes the directory.
func TestLocateCUDAPluginInSitePackages(t *testing.T) {
	clearTargetEnv(t)
	t.Setenv(envGoXLAPluginPaths, t.TempDir())
	sitePackages := t.TempDir()
	buildSharedLibrary(t, filepath.Join(sitePackages, "jax_plugins", "xla_cuda12"), "xla_cuda_plugin.so", fakePluginNilAPI)
	cuda13 := buildSharedLibrary(t, filepath.Join(sitePackages, "jax_plugins", "xla_cuda13"), "xla_cuda_plugin.so", fakePluginNilAPI)
	t.Setenv("PYTHONPATH", sitePackages)

	path, source, err := locatePlugin(context.Background(), mustSpec(t, CUDA), "")
	require.NoError(t, err, "python3 must be on PATH")
	assert.Equal(t, cuda13, path, "the newest CUDA plugin wins")
	assert.Equal(t, "search", source)
}

// TestPluginDigestFollowsTheContents: the same plugin bytes at another
// path and time give the same digest (a node that installed the same
// plugin shares compiled programs); another size or changed bytes do not.
func TestPluginDigestFollowsTheContents(t *testing.T) {
	data := make([]byte, 3<<20)
	for i := range data {
		data[i] = byte(i * 7 % 251)
	}
	write := func(b []byte) string {
		p := filepath.Join(t.TempDir(), "plugin.so")
		require.NoError(t, os.WriteFile(p, b, 0o644))
		return p
	}
	a := write(data)
	time.Sleep(10 * time.Millisecond)
	b := write(data)
	assert.Equal(t, pluginDigest(a), pluginDigest(b), "same bytes, other path and time")
	changed := slices.Clone(data)
	changed[10*(len(changed)-digestPieceSize)/(digestPieces-1)] ^= 1 // in the 11th piece
	assert.NotEqual(t, pluginDigest(a), pluginDigest(write(changed)))
	assert.NotEqual(t, pluginDigest(a), pluginDigest(write(data[:len(data)-1])))
	assert.NotEqual(t, pluginDigest(a), pluginDigest(write(nil)))
	assert.Equal(t, "unreadable:/nonexistent.so", pluginDigest("/nonexistent.so"))
	small := write([]byte("tiny"))
	assert.Equal(t, pluginDigest(small), pluginDigest(write([]byte("tiny"))), "a file smaller than a piece")
}
