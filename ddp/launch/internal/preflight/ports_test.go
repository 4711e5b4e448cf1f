package preflight

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPortFree: a port this process listens on is named with this
// process's pid and command; a free port passes.
func TestPortFree(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	f := PortFree("/proc", port, "--master_port", "pick another")
	require.NotNil(t, f)
	assert.Equal(t, "port", f.Check)
	assert.Contains(t, f.Problem, fmt.Sprintf("is taken by pid %d (", os.Getpid()))
	assert.Contains(t, f.Problem, filepath.Base(os.Args[0]))
	assert.Equal(t, "pick another", f.Fix)
	holder, found, ok := PortHolder("/proc", port)
	assert.True(t, ok)
	assert.True(t, found)
	assert.Equal(t, os.Getpid(), holder.PID)

	require.NoError(t, ln.Close())
	assert.Nil(t, PortFree("/proc", port, "--master_port", "pick another"))
	_, _, ok = PortHolder("/proc", port)
	assert.False(t, ok, "nothing listens on it now")
}

// TestPortHolderReadsHostileTables: truncated, malformed and huge socket
// tables, and sockets nobody's fd points at, find nothing and never panic.
func TestPortHolderReadsHostileTables(t *testing.T) {
	for name, table := range map[string]string{
		"empty":     "",
		"header":    "  sl  local_address rem_address   st\n",
		"short":     "0: 0100007F:1F90 00000000:0000 0A\n",
		"bad port":  "0: 0100007F:ZZZZ 00000000:0000 0A 0 0 0 0 0 123 1\n",
		"huge port": "0: 0100007F:FFFFFFFFFF 00000000:0000 0A 0 0 0 0 0 123 1\n",
		"orphan":    "0: 0100007F:1F90 00000000:0000 0A 0 0 0 0 0 999999999 1\n",
		"lines":     strings.Repeat("x\n", 100000),
	} {
		t.Run(name, func(t *testing.T) {
			proc := t.TempDir()
			require.NoError(t, os.MkdirAll(filepath.Join(proc, "net"), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(proc, "net", "tcp"), []byte(table), 0o644))
			_, found, _ := PortHolder(proc, 8080)
			assert.False(t, found)
		})
	}
	_, found, ok := PortHolder(filepath.Join(t.TempDir(), "absent"), 8080)
	assert.False(t, found || ok)
}
