package freeport

import (
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPick: the port is free to bind, on loopback and on every interface;
// a host that is not this machine's is an error.
func TestPick(t *testing.T) {
	for _, host := range []string{"127.0.0.1", ""} {
		p, err := Pick(host)
		require.NoError(t, err)
		ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p)))
		require.NoError(t, err, "port %d on %q", p, host)
		ln.Close()
	}
	_, err := Pick("192.0.2.1") // TEST-NET-1: never this machine's
	assert.ErrorContains(t, err, "picking a free port")
}
