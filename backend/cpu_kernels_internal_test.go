package backend

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseCPUKernels(t *testing.T) {
	for _, v := range []string{"", "onednn", "xla"} {
		got, err := parseCPUKernels(v)
		require.NoError(t, err, v)
		assert.Equal(t, v, got)
	}
	for _, v := range []string{"OneDNN", "mkl", " xla", "onednn,xla"} {
		_, err := parseCPUKernels(v)
		assert.ErrorIs(t, err, ErrBadOption, v)
		assert.ErrorContains(t, err, "want onednn or xla", v)
	}
}

// TestCPUKernelsInTheCacheIdentity: a program compiled with oneDNN's
// custom calls is cached apart from XLA's own.
func TestCPUKernelsInTheCacheIdentity(t *testing.T) {
	a := &Backend{target: CPU, pluginPath: "/nonexistent", kernels: "onednn 2.6.3"}
	b := &Backend{target: CPU, pluginPath: "/nonexistent", kernels: "xla"}
	assert.NotEqual(t, a.identityOf("0.115", 0, 115), b.identityOf("0.115", 0, 115))
	assert.Equal(t, "xla", (&Backend{}).Kernels())
}
