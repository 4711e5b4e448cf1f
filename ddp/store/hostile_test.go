package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// heapInUse is the live heap after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// TestUnauthenticatedPeersCostLittle: 100 connections that each declare a
// 64 MiB handshake answer (the most a message may be) and then stall used
// to make the server allocate 6.6 GB and keep it. The handshake answer is
// now capped at 64 bytes and memory only grows with bytes received; a
// legitimate client still gets through meanwhile.
func TestUnauthenticatedPeersCostLittle(t *testing.T) {
	srv, err := Listen("127.0.0.1:0", "s3cret")
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	before := heapInUse()
	var conns []net.Conn
	for range 100 {
		c, err := net.Dial("tcp", srv.Addr())
		require.NoError(t, err)
		conns = append(conns, c)
		_, err = readFrame(c) // the nonce
		require.NoError(t, err)
		_, err = c.Write(binary.BigEndian.AppendUint32(nil, MaxMessageSize))
		require.NoError(t, err)
	}
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		status, err := readFrame(c)
		require.NoError(t, err, "the server answers an oversized handshake at once")
		assert.Contains(t, string(status), "exceeds the 64-byte limit")
		c.Close()
	}
	assert.Less(t, heapInUse(), before+8<<20, "a hundred hostile handshakes cost well under 8 MiB")

	// Declared-large requests from an authenticated client that never come:
	// nothing is allocated up front either.
	var stalled []net.Conn
	for range 50 {
		c := authenticatedConn(t, srv.Addr(), "s3cret")
		_, err := c.Write(binary.BigEndian.AppendUint32(nil, MaxMessageSize))
		require.NoError(t, err)
		stalled = append(stalled, c)
	}
	time.Sleep(100 * time.Millisecond)
	assert.Less(t, heapInUse(), before+16<<20, "50 stalled 64 MiB requests")
	for _, c := range stalled {
		c.Close()
	}

	ctx := ctxWithTimeout(t, 10*time.Second)
	cl, err := Dial(ctx, srv.Addr(), "s3cret")
	require.NoError(t, err)
	defer cl.Close()
	require.NoError(t, cl.Set(ctx, "k", []byte("v")))
}

// TestPendingHandshakesAreBounded: a burst of connections from one
// address is held while it is young (a node's ranks dialling at once);
// once older than the server's evictAfter, the oldest silent ones go as
// new ones arrive; past hardPendingPerSource the oldest go at once.
func TestPendingHandshakesAreBounded(t *testing.T) {
	srv, err := Listen("127.0.0.1:0", "")
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	var silent []net.Conn
	t.Cleanup(func() {
		for _, c := range silent {
			c.Close()
		}
	})
	open := func(n int) {
		for range n {
			c, err := net.Dial("tcp", srv.Addr())
			require.NoError(t, err)
			silent = append(silent, c)
		}
	}
	young := func(d time.Duration) {
		srv.mu.Lock()
		srv.evictAfter = d
		srv.mu.Unlock()
	}
	young(time.Hour) // however slow the machine, the burst is young
	open(100)
	assert.Eventually(t, func() bool { return srv.pendingCount() == 100 }, 5*time.Second, 5*time.Millisecond,
		"a young burst is held past maxPendingPerSource")
	young(0) // now every pending handshake has aged
	open(36)
	assert.Eventually(t, func() bool { return srv.pendingCount() == 100 }, 5*time.Second, 10*time.Millisecond,
		"each newcomer evicted one aged connection")
	for i, c := range silent {
		_, _ = readFrame(c) // the nonce, sent to every connection
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		_, err := c.Read(make([]byte, 1))
		if i < 36 {
			assert.ErrorIs(t, err, io.EOF, "connection %d (among the oldest) was closed", i)
		} else {
			assert.ErrorIs(t, err, os.ErrDeadlineExceeded, "connection %d still waits", i)
		}
	}
	open(hardPendingPerSource + 50)
	assert.Eventually(t, func() bool { return srv.pendingCount() <= hardPendingPerSource }, 10*time.Second, 10*time.Millisecond,
		"one address holds at most %d", hardPendingPerSource)
}

// TestSilentConnectionsDoNotLockClientsOut: 1000 connections that never
// send a byte (from the clients' own address) used to fill the pending
// handshakes and lock real ranks out for the handshake timeout; now the
// silent ones are held within the hard bound while young and evicted as
// they age, and a real client completes 100 operations without an
// error, with or without a token.
func TestSilentConnectionsDoNotLockClientsOut(t *testing.T) {
	for _, token := range []string{"s3cret", ""} {
		srv, err := Listen("127.0.0.1:0", token)
		require.NoError(t, err)
		var silent []net.Conn
		for range 1000 {
			c, err := net.Dial("tcp", srv.Addr())
			require.NoError(t, err)
			silent = append(silent, c)
		}
		ctx := ctxWithTimeout(t, 10*time.Second)
		start := time.Now()
		errs := 0
		for i := range 100 {
			cl, err := Dial(ctx, srv.Addr(), token)
			if err != nil {
				errs++
				continue
			}
			if err := cl.Set(ctx, fmt.Sprint("k", i), []byte("v")); err != nil {
				errs++
			}
			cl.Close()
		}
		assert.Zero(t, errs, "token %q", token)
		assert.Less(t, time.Since(start), 5*time.Second, "token %q", token)
		assert.LessOrEqual(t, srv.pendingCount(), hardPendingPerSource)
		for _, c := range silent {
			c.Close()
		}
		require.NoError(t, srv.Close())
	}
}

// TestClientsGetThroughAConnectionFlood: an attacker opening silent
// connections without pause, from the clients' own address, all the
// while 100 real operations run: an evicted handshake is retried, and
// every operation succeeds.
func TestClientsGetThroughAConnectionFlood(t *testing.T) {
	srv, err := Listen("127.0.0.1:0", "s3cret")
	require.NoError(t, err)
	defer srv.Close()
	stop, done := make(chan struct{}), make(chan struct{})
	flooding := make(chan struct{})
	var opened atomic.Int64
	go func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
			close(done)
		}()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if c, err := net.Dial("tcp", srv.Addr()); err == nil {
				conns = append(conns, c)
				if opened.Add(1) == 200 {
					close(flooding)
				}
			}
			if len(conns) > 4000 {
				conns[0].Close()
				conns = conns[1:]
			}
		}
	}()
	// The operations start once the flood runs (a fast machine finished
	// all 100 before the flood had opened 100 connections).
	select {
	case <-flooding:
	case <-time.After(20 * time.Second):
		close(stop)
		<-done
		t.Fatalf("the flood opened %d connections in 20 s", opened.Load())
	}
	before := opened.Load()
	ctx := ctxWithTimeout(t, 30*time.Second)
	errs := 0
	for i := range 100 {
		cl, err := Dial(ctx, srv.Addr(), "s3cret")
		if err != nil {
			t.Log(err)
			errs++
			continue
		}
		if err := cl.Set(ctx, fmt.Sprint("k", i), []byte("v")); err != nil {
			t.Log(err)
			errs++
		}
		cl.Close()
	}
	during := opened.Load() - before
	close(stop)
	<-done
	assert.Positive(t, during, "the flood went on during the operations")
	assert.Zero(t, errs)
}

// TestAcceptSurvivesRunningOutOfFiles runs a store in a child process
// whose file limit is tiny: accept fails with EMFILE while clients hold
// every descriptor, and once they let go the server accepts again (it used
// to stop accepting forever while the process stayed alive).
func TestAcceptSurvivesRunningOutOfFiles(t *testing.T) {
	if os.Getenv("XLADDP_STORE_EMFILE_CHILD") == "1" {
		emfileChild()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestAcceptSurvivesRunningOutOfFiles$")
	cmd.Env = append(os.Environ(), "XLADDP_STORE_EMFILE_CHILD=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "served after EMFILE")
}

func emfileChild() {
	fail := func(format string, args ...any) {
		panic(strconvQuote(format, args...))
	}
	srv, err := Listen("127.0.0.1:0", "")
	if err != nil {
		fail("listen: %v", err)
	}
	var used uint64
	entries, _ := os.ReadDir("/proc/self/fd")
	used = uint64(len(entries))
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: used + 20, Max: used + 20}); err != nil {
		fail("setrlimit: %v", err)
	}
	// Each connection costs the server one descriptor (and this process
	// one for the client end): exhaust them.
	var conns []net.Conn
	for range 40 {
		c, err := net.DialTimeout("tcp", srv.Addr(), time.Second)
		if err != nil {
			break
		}
		conns = append(conns, c)
	}
	time.Sleep(200 * time.Millisecond) // the server hits EMFILE and backs off
	for _, c := range conns {
		c.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := Dial(ctx, srv.Addr(), "")
	if err != nil {
		fail("dial after EMFILE: %v", err)
	}
	if err := cl.Set(ctx, "k", []byte("v")); err != nil {
		fail("set after EMFILE: %v", err)
	}
	println("served after EMFILE")
}

func strconvQuote(format string, args ...any) string {
	return strconv.Quote(fmt.Sprintf(format, args...))
}

// authenticatedConn completes the handshake by hand and returns the raw
// connection.
func authenticatedConn(t *testing.T, addr, token string) net.Conn {
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	nonce, err := readFrame(c)
	require.NoError(t, err)
	require.NoError(t, writeFrame(c, proof([]byte(token), nonce)))
	status, err := readFrame(c)
	require.NoError(t, err)
	require.Equal(t, []byte{statusOK}, status)
	return c
}

// TestUnresolvableHostFailsAtOnce: a MASTER_ADDR that does not resolve is
// not retried like a refused connection until the timeout.
func TestUnresolvableHostFailsAtOnce(t *testing.T) {
	start := time.Now()
	ctx := ctxWithTimeout(t, 30*time.Second)
	_, err := Dial(ctx, "no-such-host.invalid:29500", "")
	require.Error(t, err)
	assert.Less(t, time.Since(start), 5*time.Second)
	assert.Contains(t, err.Error(), `the store's host "no-such-host.invalid" does not resolve`)
}

// TestBurstOfRealClientsFromOneAddress: 300 ranks of one host dial at
// once, more than maxPendingPerSource handshakes from one address: the
// young burst is held (any evicted would retry), and every one completes
// its operation.
func TestBurstOfRealClientsFromOneAddress(t *testing.T) {
	srv, err := Listen("127.0.0.1:0", "s3cret")
	require.NoError(t, err)
	defer srv.Close()
	ctx := ctxWithTimeout(t, 30*time.Second)
	errs := make(chan error, 300)
	for range 300 {
		go func() {
			cl, err := Dial(ctx, srv.Addr(), "s3cret")
			if err == nil {
				_, err = cl.Add(ctx, "joined", 1)
				cl.Close()
			}
			errs <- err
		}()
	}
	for range 300 {
		assert.NoError(t, <-errs)
	}
	cl, err := Dial(ctx, srv.Addr(), "s3cret")
	require.NoError(t, err)
	defer cl.Close()
	n, err := cl.Add(ctx, "joined", 0)
	require.NoError(t, err)
	assert.EqualValues(t, 300, n)
}
