package tcp

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/xladdp/xladdp/ddp/internal/transport"
	"github.com/xladdp/xladdp/ddp/store"
	"github.com/xladdp/xladdp/internal/workerenv"
)

// envNeedsMaster is env://'s error without MASTER_ADDR and MASTER_PORT;
// under an mpirun across hosts it says the two ways out.
func envNeedsMaster(env workerenv.World) error {
	err := fmt.Errorf("ddp: env:// needs $%s and $%s (the address and port of rank 0)", workerenv.MasterAddr, workerenv.MasterPort)
	if env.OpenMPI.Rank != workerenv.Unset {
		err = fmt.Errorf("%w: under mpirun across hosts, run the process group over MPI (--backend mpi, a build with -tags mpi), "+
			"or pass the address to every rank: mpirun -x %s=<rank 0's host> -x %s=<a free port> ...",
			err, workerenv.MasterAddr, workerenv.MasterPort)
	}
	return err
}

// openStore connects to (and on rank 0, for env:// and tcp://, hosts) the
// rendezvous store, and returns the host others should route to.
func openStore(ctx context.Context, o transport.Config) (store.Store, *store.Server, string, error) {
	u, err := url.Parse(o.InitMethod)
	if err != nil {
		return nil, nil, "", fmt.Errorf("ddp: init method %q: %w", o.InitMethod, err)
	}
	if u.Scheme == "file" {
		if u.Path == "" {
			return nil, nil, "", fmt.Errorf("ddp: init method %q: want file:///absolute/path", o.InitMethod)
		}
		s, err := store.OpenFileStore(ctx, u.Path)
		return s, nil, "", err
	}
	host, port, err := masterAddr(u, o.InitMethod)
	if err != nil {
		return nil, nil, "", err
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return nil, nil, "", fmt.Errorf("ddp: master port %q is not a port number (1-65535)", port)
	}
	addr := net.JoinHostPort(host, port)
	if env, _ := workerenv.Parse(os.Getenv); env.AgentStore && u.Scheme == "env" {
		// torchrun (torch >= 2) hosts a c10d TCPStore on MASTER_PORT for
		// its workers: join it, under torch's per-attempt worker prefix.
		prefix := fmt.Sprintf("/worker/attempt_%d/xladdp/", max(env.RestartCount, 0))
		c, err := store.DialTorch(ctx, addr, prefix)
		return c, nil, host, err
	}
	c, srv, err := hostAndDial(ctx, o, port, addr)
	if err != nil {
		return nil, nil, "", err
	}
	return c, srv, host, nil
}

// masterAddr is the store's host and port for an env:// or tcp:// init
// method u (given as initMethod).
func masterAddr(u *url.URL, initMethod string) (host, port string, err error) {
	switch u.Scheme {
	case "env":
		env, err := workerenv.Parse(os.Getenv)
		if err != nil {
			return "", "", fmt.Errorf("ddp: %w", err)
		}
		host, port = env.MasterAddr, env.MasterPort
		if host == "" && port == "" && env.OpenMPI.SingleHost() {
			host, port = openMPISingleHost(env.OpenMPI.JobID)
		}
		if host == "" || port == "" {
			return "", "", envNeedsMaster(env)
		}
	case "tcp":
		host, port = u.Hostname(), u.Port()
		if host == "" || port == "" {
			return "", "", fmt.Errorf("ddp: init method %q: want tcp://host:port", initMethod)
		}
	default:
		return "", "", fmt.Errorf("ddp: init method %q: use env://, tcp://host:port or file:///path", initMethod)
	}
	return host, port, nil
}

// hostAndDial hosts the store on port (rank 0) and connects to it at
// addr; it returns the server it started, if any.
func hostAndDial(ctx context.Context, o transport.Config, port, addr string) (store.Store, *store.Server, error) {
	var srv *store.Server
	if o.Rank == 0 {
		var err error
		if srv, err = store.Listen(net.JoinHostPort("", port), o.Token); err != nil {
			// The port may be held by the store of another process that
			// also claims rank 0: join it, so the rendezvous can tell both.
			probe, cancel := context.WithTimeout(ctx, 2*time.Second)
			c, dialErr := store.Dial(probe, addr, o.Token)
			cancel()
			if dialErr != nil {
				return nil, nil, err
			}
			return c, nil, nil
		}
	}
	c, err := store.Dial(ctx, addr, o.Token)
	if err != nil {
		if srv != nil {
			srv.Close()
		}
		return nil, nil, err
	}
	return c, srv, nil
}

// EnvAdvertiseAddr sets the IP other ranks use to reach this one.
const EnvAdvertiseAddr = "XLADDP_ADVERTISE_ADDR"

// advertiseIP picks the address other ranks reach this one at: the local
// end of a route towards routeTo, $XLADDP_ADVERTISE_ADDR, or loopback.
func advertiseIP(routeTo string) string {
	if a := os.Getenv(EnvAdvertiseAddr); a != "" {
		return a
	}
	if routeTo == "" {
		routeTo = "192.0.2.1" // any routable address picks the default route
	}
	if c, err := net.Dial("udp", net.JoinHostPort(routeTo, "9")); err == nil {
		defer c.Close()
		return c.LocalAddr().(*net.UDPAddr).IP.String()
	}
	return "127.0.0.1"
}

// open joins the group: it meets every other rank through the store
// (checking ranks are unique and agree on the world size), connects to
// each of them, and returns when all are connected or the timeout passes.
func open(ctx context.Context, o transport.Config) (transport.Opened, error) {
	if _, err := shmSlotBytes(); err != nil {
		return transport.Opened{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	st, srv, routeTo, err := openStore(ctx, o)
	if err != nil {
		return transport.Opened{}, err
	}
	g := &group{rank: o.Rank, size: o.WorldSize, timeout: o.Timeout, debug: o.Debug, store: st, storeServer: srv,
		peers: make([]*peer, o.WorldSize), broken: o.Broken}
	if err := g.rendezvous(ctx, o, routeTo); err != nil {
		if srv != nil {
			// Let the other ranks hear their own timeout before the store goes.
			g.storeServer = nil
			g.closeAll()
			_ = srv.Drain(2 * time.Second)
		} else {
			g.closeAll()
		}
		if _, agents := st.(*store.TorchClient); agents && errors.Is(err, store.ErrConnectionLost) {
			err = fmt.Errorf("%w (the store is hosted by torchrun's agent on MASTER_PORT: did torchrun exit?)", err)
		} else if srv == nil && errors.Is(err, store.ErrConnectionLost) {
			err = fmt.Errorf("%w (the store is hosted by rank 0: did rank 0 exit?)", err)
		}
		return transport.Opened{}, err
	}
	return transport.Opened{Transport: g, Store: st,
		World: transport.World{Rank: g.rank, Size: g.size, LocalRank: g.localRank, LocalSize: g.localWorldSize}}, nil
}

func (g *group) closeAll() {
	g.shm.close()
	for _, p := range g.peers {
		if p != nil {
			p.shutdown()
		}
	}
	if g.store != nil {
		g.store.Close()
	}
	if g.storeServer != nil {
		g.storeServer.Close()
	}
}

func (g *group) rendezvous(ctx context.Context, o transport.Config, routeTo string) error {
	hostname, _ := os.Hostname()
	nonce := make([]byte, 8)
	_, _ = rand.Read(nonce)
	identity := fmt.Sprintf("%s pid %d (%s)", hostname, os.Getpid(), hex.EncodeToString(nonce))
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		return fmt.Errorf("ddp: rank %d: listening for peers: %w", g.rank, err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	self := fmt.Sprintf("%s %s", net.JoinHostPort(advertiseIP(routeTo), strconv.Itoa(port)), hostname)
	m, err := Meet(ctx, g.store, g.rank, g.size, self, identity, g.timeout)
	if err != nil {
		return err
	}
	g.setLocal(o, m.Hosts)
	if err := g.connectMesh(ctx, ln, m.Addrs, m.GroupID, o.Token); err != nil {
		return err
	}
	return g.setupShm(ctx, m.Hosts, m.GroupID)
}

// setLocal fills the local rank and size: from Options or the environment,
// else from the ranks sharing this host name.
func (g *group) setLocal(o transport.Config, hosts []string) {
	var local []int
	for r, h := range hosts {
		if h == hosts[g.rank] {
			local = append(local, r)
		}
	}
	g.localRank, g.localWorldSize = o.LocalRank, o.LocalWorldSize
	if g.localRank == -1 {
		g.localRank = slices.Index(local, g.rank)
	}
	if g.localWorldSize == -1 {
		g.localWorldSize = len(local)
	}
}

// helloTimeout bounds how long a new peer connection may take to identify
// itself.
const helloTimeout = 5 * time.Second

// hello is what a connecting rank sends: the group id, its rank and, with
// a token, an HMAC of both.
func hello(groupID []byte, rank int, token string) []byte {
	msg := binary.BigEndian.AppendUint32(append([]byte(nil), groupID...), uint32(rank))
	mac := hmac.New(sha256.New, []byte(token))
	mac.Write(msg)
	return mac.Sum(msg)
}

// connectMesh links every pair of ranks: each rank dials the lower ranks
// and accepts the higher ones.
func (g *group) connectMesh(ctx context.Context, ln net.Listener, addrs []string, groupID []byte, token string) error {
	m := &mesh{g: g, groupID: groupID, token: token, helloSize: len(hello(groupID, 0, token))}
	var wg sync.WaitGroup
	// Cancelling ctx ends the accept loop at once, not at the deadline.
	stop := context.AfterFunc(ctx, func() { _ = ln.(*net.TCPListener).SetDeadline(time.Now()) })
	defer stop()
	wg.Add(1)
	go func() {
		defer wg.Done()
		m.acceptHigher(ctx, ln, g.size-1-g.rank)
	}()
	for r := range g.rank {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.dial(ctx, r, addrs[r])
		}()
	}
	wg.Wait()
	return errors.Join(m.errs...)
}

// mesh is what connectMesh's accepting and dialling goroutines share.
type mesh struct {
	g         *group
	groupID   []byte
	token     string
	helloSize int
	// mu guards errs and g.peers.
	mu   sync.Mutex
	errs []error
}

func (m *mesh) record(err error) {
	m.mu.Lock()
	m.errs = append(m.errs, err)
	m.mu.Unlock()
}

// acceptHigher accepts connections until expect higher ranks have said
// hello, or ctx ends or its deadline passes.
func (m *mesh) acceptHigher(ctx context.Context, ln net.Listener, expect int) {
	deadline, _ := ctx.Deadline()
	for accepted := 0; accepted < expect; {
		if ctx.Err() == nil {
			_ = ln.(*net.TCPListener).SetDeadline(deadline)
		}
		conn, err := ln.Accept()
		if err != nil {
			if cause := context.Cause(ctx); cause != nil {
				err = cause
			}
			m.record(fmt.Errorf("ddp: rank %d waiting for %d higher ranks to connect: %w", m.g.rank, expect-accepted, err))
			return
		}
		if m.admit(conn, deadline) {
			accepted++
		}
	}
}

// admit reads conn's hello, by deadline at the latest, and keeps conn as
// the peer it names where that is a higher rank not connected yet; it
// reports whether it kept conn, which it closes otherwise.
func (m *mesh) admit(conn net.Conn, deadline time.Time) bool {
	g := m.g
	// A stray connection that never says hello may hold the loop only
	// briefly.
	helloDeadline := time.Now().Add(helloTimeout)
	if !deadline.IsZero() && deadline.Before(helloDeadline) {
		helloDeadline = deadline
	}
	_ = conn.SetDeadline(helloDeadline)
	msg := make([]byte, m.helloSize)
	if _, err := io.ReadFull(conn, msg); err != nil {
		conn.Close()
		return false
	}
	r := int(binary.BigEndian.Uint32(msg[len(m.groupID):]))
	if !hmac.Equal(msg, hello(m.groupID, r, m.token)) || r <= g.rank || r >= g.size {
		conn.Close() // a stray or unauthenticated connection
		return false
	}
	_ = conn.SetDeadline(time.Time{})
	m.mu.Lock()
	dup := g.peers[r] != nil
	if !dup {
		g.peers[r] = newPeer(r, conn)
	}
	m.mu.Unlock()
	if dup {
		conn.Close()
	}
	return !dup
}

// dial connects to the lower rank r at addr and says hello, retrying
// until ctx ends.
func (m *mesh) dial(ctx context.Context, r int, addr string) {
	g := m.g
	var d net.Dialer
	for {
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			if _, err = conn.Write(hello(m.groupID, g.rank, m.token)); err == nil {
				m.mu.Lock()
				g.peers[r] = newPeer(r, conn)
				m.mu.Unlock()
				return
			}
			conn.Close()
		}
		select {
		case <-ctx.Done():
			m.record(fmt.Errorf("ddp: rank %d cannot connect to rank %d at %s: %w", g.rank, r, addr, err))
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// openMPISingleHost gives an mpirun job whose ranks all run on this host
// a rendezvous without MASTER_ADDR/MASTER_PORT: loopback, and a port
// derived from the job's id, the same in every rank, below Linux's
// ephemeral range (32768 up), where another process's outgoing
// connection could hold it. Jobs across hosts pass MASTER_ADDR and
// MASTER_PORT (mpirun -x).
func openMPISingleHost(jobID string) (host, port string) {
	h := fnv.New32a()
	h.Write([]byte(jobID))
	return "127.0.0.1", strconv.Itoa(openMPIPortBase + int(h.Sum32()%openMPIPorts))
}

// The ports openMPISingleHost picks from: [20000, 32768).
const (
	openMPIPortBase = 20000
	openMPIPorts    = 32768 - openMPIPortBase
)
