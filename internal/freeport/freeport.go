package freeport

import (
	"fmt"
	"net"
)

// Pick asks the kernel for a free port on host ("" for every interface).
// Another process may take it before the caller's child binds it; the
// child's bind then fails with a clear error rather than joining a stranger.
func Pick(host string) (int, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("picking a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
