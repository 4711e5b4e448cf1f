package neuron

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCompilerEnvironment: xladdp's flags are added, the user's kept and
// never overridden.
func TestCompilerEnvironment(t *testing.T) {
	cases := []struct {
		name string
		o    CompileOptions
		user map[string]string
		want map[string]string
	}{
		{"from options", CompileOptions{CacheDir: "/var/tmp/cache", RetryFailedCompilation: true, OptLevel: 1, ModelType: "transformer"}, nil,
			map[string]string{"NEURON_CC_FLAGS": "--cache_dir=/var/tmp/cache --retry_failed_compilation -O1 --model-type=transformer",
				"NEURON_COMPILE_CACHE_URL": "/var/tmp/cache"}},
		{"the user's flags win", CompileOptions{CacheDir: "/a", OptLevel: 2, ModelType: "generic"},
			map[string]string{"NEURON_CC_FLAGS": "--model-type=transformer -O1 --cache_dir=/mine", "NEURON_COMPILE_CACHE_URL": "s3://b/c"},
			map[string]string{}},
		{"added to the user's", CompileOptions{RetryFailedCompilation: true},
			map[string]string{"NEURON_CC_FLAGS": "--verbose=35"},
			map[string]string{"NEURON_CC_FLAGS": "--verbose=35 --retry_failed_compilation"}},
		{"nothing asked", CompileOptions{}, nil, map[string]string{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := CompilerEnvironment(c.o, envOf(c.user))
			require.NoError(t, err)
			assert.Equal(t, c.want, got)
		})
	}
	_, err := CompilerEnvironment(CompileOptions{OptLevel: 7}, envOf(nil))
	assert.ErrorContains(t, err, "-O0 to -O3")
}

// TestCacheWarning: a local directory gets no warning; the network
// filesystems' types do (none can be mounted here).
func TestCacheWarning(t *testing.T) {
	assert.Empty(t, CacheWarning(t.TempDir()))
	assert.Empty(t, CacheWarning("/nonexistent/dir"))
	for _, fs := range []uint32{nfsMagic, lustreMagic, smbMagic, fuseMagic} {
		assert.Contains(t, cacheWarningFor("/mnt/efs/cache", fs), "is on a network filesystem")
	}
	assert.Empty(t, cacheWarningFor("/var/tmp/c", 0xef53), "ext4")
}
