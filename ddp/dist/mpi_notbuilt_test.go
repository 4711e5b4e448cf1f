//go:build !mpi

package dist

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMPIBackendNotBuiltIn: without -tags mpi, asking for the mpi backend
// says how to get it instead of falling back to TCP.
func TestMPIBackendNotBuiltIn(t *testing.T) {
	o := NewOptions()
	o.Transport = TransportMPI
	g, err := InitProcessGroup(t.Context(), o)
	require.Error(t, err)
	assert.Nil(t, g)
	assert.Contains(t, err.Error(), `backend "mpi" is not built into this program: rebuild it with go build -tags mpi`)
}
