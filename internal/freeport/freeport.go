package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// below is how far under the kernel's ephemeral range Pick draws from.
const below = 8000

// tries bounds the random draws before Pick falls back to the kernel.
const tries = 64

// Pick returns a port free on host ("" for every interface) now.
//
// It draws from just below the kernel's ephemeral range: a port the kernel
// hands out there (Listen on :0) can be taken a moment later as the source
// port of any outgoing connection on the machine, which a busy job or test
// suite makes by the thousand. Below the range only another listener can
// take it. If no drawn port binds, the kernel picks one.
//
// Another process may still take the port before the caller's child binds
// it; the child's bind then fails with a clear error rather than joining a
// stranger.
func Pick(host string) (int, error) {
	if low, ok := ephemeralLow(); ok && low-below > 1024 {
		for range tries {
			port := low - below + rand.IntN(below)
			if free(host, port) {
				return port, nil
			}
		}
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("picking a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func free(host string, port int) bool {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return false
	}
	ln.Close()
	return true
}

// ephemeralLow is the first port of the kernel's ephemeral range, if the
// kernel says.
func ephemeralLow() (int, bool) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, false
	}
	fields := strings.Fields(string(b))
	if len(fields) != 2 {
		return 0, false
	}
	low, err := strconv.Atoi(fields[0])
	return low, err == nil
}
