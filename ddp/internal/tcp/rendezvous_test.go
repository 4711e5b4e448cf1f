package tcp

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An mpirun job's derived port is the same for one job id, differs
// between ids, and stays below the ephemeral range, where another
// process's outgoing connection could hold it.
func TestOpenMPISingleHostPort(t *testing.T) {
	seen := map[string]bool{}
	for i := range 2000 {
		id := fmt.Sprintf("%d", 1000000+i*7919)
		host, port := openMPISingleHost(id)
		assert.Equal(t, "127.0.0.1", host)
		_, again := openMPISingleHost(id)
		assert.Equal(t, port, again)
		p, err := strconv.Atoi(port)
		require.NoError(t, err)
		assert.GreaterOrEqual(t, p, 20000)
		assert.Less(t, p, 32768)
		seen[port] = true
	}
	assert.Greater(t, len(seen), 1500, "ids spread over the range")
}
