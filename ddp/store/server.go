package store

import (
	"container/list"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// nonceSize is the length of the authentication challenge.
const nonceSize = 32

// Limits on what a connection can cost before it has authenticated, and
// on a request once it has started arriving.
const (
	// handshakeTimeout bounds the authentication exchange.
	handshakeTimeout = 10 * time.Second
	// maxHandshakeMessage bounds the handshake answer (an HMAC-SHA256).
	maxHandshakeMessage = 64
	// maxPendingHandshakes bounds connections not yet authenticated, and
	// maxPendingPerSource those from one address: a new connection over
	// either bound closes the oldest one pending (of that address, for
	// the second) once it has waited defaultEvictAfter, so silent connections
	// cannot lock real clients out, while a burst of real ones (a trn2
	// node's 128 ranks dialling at once) is not cut short: it finishes
	// its handshakes in milliseconds. Past the hard bounds the oldest
	// goes whatever its age, so a flood's cost stays bounded.
	maxPendingHandshakes  = 256
	maxPendingPerSource   = 64
	hardPendingHandshakes = 4096
	hardPendingPerSource  = 1024
	defaultEvictAfter     = 250 * time.Millisecond
	// requestTimeout bounds reading the rest of a request once its length
	// has arrived (an idle connection waits without limit).
	requestTimeout = time.Minute
	// maxAcceptBackoff caps the pause after a failed accept (out of file
	// descriptors), after which the server tries again.
	maxAcceptBackoff = time.Second
)

// Server is the TCP store's server.
type Server struct {
	ln    net.Listener
	token []byte

	mu      sync.Mutex
	data    map[string][]byte
	changed chan struct{} // closed and replaced on every change
	conns   map[net.Conn]bool
	closed  bool
	wg      sync.WaitGroup
	// pending holds the connections still in their handshake, oldest
	// first (*handshake), and pendingFrom how many come from each address.
	pending     list.List
	pendingFrom map[string]int
	// evictAfter is how long a pending handshake is young (guarded by
	// mu; defaultEvictAfter, a test's own).
	evictAfter time.Duration
}

// handshake is a connection in its handshake.
type handshake struct {
	conn   net.Conn
	source string
	since  time.Time
	elem   *list.Element // in Server.pending; nil once out of it
}

// Listen starts a server on addr ("host:port"; port 0 picks one). A
// non-empty token makes every client prove it before any command.
func Listen(addr, token string) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("store: cannot listen on %s: %w (is another job or store using the port? pick another MASTER_PORT)", addr, err)
	}
	s := &Server{ln: ln, token: []byte(token), data: map[string][]byte{}, changed: make(chan struct{}), conns: map[net.Conn]bool{},
		pendingFrom: map[string]int{}, evictAfter: defaultEvictAfter}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Addr returns the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the server and drops every connection.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	close(s.changed)
	s.mu.Unlock()
	err := s.ln.Close()
	s.wg.Wait()
	return err
}

// accept serves connections until Close. A failed accept (EMFILE when
// the process is out of file descriptors) pauses and tries again, with a
// backoff, instead of ending the server while the process lives on.
func (s *Server) accept() {
	defer s.wg.Done()
	backoff := 5 * time.Millisecond
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || s.isClosed() {
				return
			}
			time.Sleep(backoff)
			backoff = min(2*backoff, maxAcceptBackoff)
			continue
		}
		backoff = 5 * time.Millisecond
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		h := s.admit(c)
		s.conns[c] = true
		s.mu.Unlock()
		s.wg.Add(1)
		go s.serve(h)
	}
}

// admit records c as pending, first closing the oldest pending handshake
// of its address if that address has maxPendingPerSource, and the oldest
// of all if maxPendingHandshakes are pending, each once it has waited
// s.evictAfter (at the hard bounds, at once). Called with mu held.
func (s *Server) admit(c net.Conn) *handshake {
	source := c.RemoteAddr().String()
	if host, _, err := net.SplitHostPort(source); err == nil {
		source = host
	}
	now := time.Now()
	if n := s.pendingFrom[source]; n >= maxPendingPerSource {
		for e := s.pending.Front(); e != nil; e = e.Next() {
			if h := e.Value.(*handshake); h.source == source {
				if n >= hardPendingPerSource || now.Sub(h.since) >= s.evictAfter {
					s.evict(h)
				}
				break
			}
		}
	}
	if n := s.pending.Len(); n >= maxPendingHandshakes {
		if h := s.pending.Front().Value.(*handshake); n >= hardPendingHandshakes || now.Sub(h.since) >= s.evictAfter {
			s.evict(h)
		}
	}
	h := &handshake{conn: c, source: source, since: now}
	h.elem = s.pending.PushBack(h)
	s.pendingFrom[source]++
	return h
}

// evict closes a pending handshake's connection; its serve goroutine
// then fails the handshake and ends. Called with mu held.
func (s *Server) evict(h *handshake) {
	s.settled(h)
	h.conn.Close()
}

// settled takes h out of the pending handshakes. Called with mu held.
func (s *Server) settled(h *handshake) {
	if h.elem == nil {
		return
	}
	s.pending.Remove(h.elem)
	h.elem = nil
	if s.pendingFrom[h.source]--; s.pendingFrom[h.source] == 0 {
		delete(s.pendingFrom, h.source)
	}
}

// pendingCount is how many connections are in their handshake.
func (s *Server) pendingCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending.Len()
}

// proof is HMAC-SHA256(token, nonce): what an authenticated client sends.
func proof(token, nonce []byte) []byte {
	m := hmac.New(sha256.New, token)
	m.Write(nonce)
	return m.Sum(nil)
}

func (s *Server) serve(h *handshake) {
	c := h.conn
	defer s.wg.Done()
	defer func() {
		c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	err := s.authenticate(h)
	s.mu.Lock()
	s.settled(h)
	s.mu.Unlock()
	if err != nil {
		_ = writeFrame(c, append([]byte{statusError}, err.Error()...))
		return
	}
	for {
		payload, err := s.readRequest(c)
		if err != nil {
			return
		}
		req, err := decodeRequest(payload)
		if err != nil {
			_ = writeFrame(c, append([]byte{statusError}, err.Error()...))
			return
		}
		if err := writeFrame(c, s.handle(req)); err != nil {
			return
		}
	}
}

func (s *Server) authenticate(h *handshake) error {
	c := h.conn
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	defer c.SetDeadline(time.Time{})
	nonce := make([]byte, nonceSize)
	if _, err := rand.Read(nonce); err != nil {
		return err
	}
	if err := writeFrame(c, nonce); err != nil {
		return err
	}
	answer, err := readFrameLimit(c, maxHandshakeMessage)
	if err != nil {
		return err
	}
	if len(s.token) > 0 && !hmac.Equal(answer, proof(s.token, nonce)) {
		return errors.New("store: authentication failed: the client's XLADDP_STORE_TOKEN does not match the server's")
	}
	// Out of the pending handshakes before the client hears it is in, so
	// that no eviction closes an authenticated connection.
	s.mu.Lock()
	evicted := h.elem == nil
	s.settled(h)
	s.mu.Unlock()
	if evicted {
		return errors.New("store: handshake dropped: too many connections in their handshake")
	}
	return writeFrame(c, []byte{statusOK})
}

// readRequest reads one request from an authenticated connection: it may
// idle before the request, but once the request starts it must arrive
// within requestTimeout.
func (s *Server) readRequest(c net.Conn) ([]byte, error) {
	_ = c.SetReadDeadline(time.Time{})
	r := &deadlineOnFirstByte{conn: c}
	return readFrame(r)
}

// deadlineOnFirstByte sets the request deadline once the first byte of a
// request has been read.
type deadlineOnFirstByte struct {
	conn    net.Conn
	started bool
}

func (d *deadlineOnFirstByte) Read(p []byte) (int, error) {
	n, err := d.conn.Read(p)
	if n > 0 && !d.started {
		d.started = true
		_ = d.conn.SetReadDeadline(time.Now().Add(requestTimeout))
	}
	return n, err
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// notifyLocked wakes every waiter; call with s.mu held after a change.
func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// handle answers a request; the operations are in ops.go.
func (s *Server) handle(req request) []byte {
	switch req.op {
	case opSet:
		return s.set(req)
	case opAdd:
		return s.add(req)
	case opCompareSet:
		return s.compareSet(req)
	case opDelete:
		return s.deleteKey(req)
	case opNumKeys:
		return s.numKeys()
	case opCheck:
		return s.check(req)
	}
	// opGet and opWait block until their keys exist or the timeout passes.
	return s.await(req)
}

func (s *Server) missingLocked(keys []string) []string {
	var missing []string
	for _, k := range keys {
		if _, ok := s.data[k]; !ok {
			missing = append(missing, k)
		}
	}
	return missing
}

// Drain waits until every client has disconnected, or timeout passes, then
// closes the server. A host leaving after a failed rendezvous uses it so
// the ranks still waiting receive their own answer instead of a broken
// connection.
func (s *Server) Drain(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		s.mu.Lock()
		n := len(s.conns)
		s.mu.Unlock()
		if n == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return s.Close()
}
