package store

import (
	"context"
	"errors"
	"net"
	"sync"
)

// connPool keeps a client's idle connections: a call takes one (or dials
// a new one) and gives it back when the answer is in, so a call blocked
// on a missing key does not hold up another goroutine's.
type connPool struct {
	dial   func(ctx context.Context) (net.Conn, error)
	mu     sync.Mutex
	idle   []net.Conn
	closed bool
}

// start opens the pool's first connection with dial, which later takes
// use too.
func (p *connPool) start(ctx context.Context, dial func(ctx context.Context) (net.Conn, error)) error {
	p.dial = dial
	conn, err := dial(ctx)
	if err != nil {
		return err
	}
	p.idle = append(p.idle, conn)
	return nil
}

// take returns an idle connection or a new one.
func (p *connPool) take(ctx context.Context) (net.Conn, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, errors.New("store: client closed")
	}
	if n := len(p.idle); n > 0 {
		conn := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return conn, nil
	}
	p.mu.Unlock()
	return p.dial(ctx)
}

// giveBack returns a healthy connection (closing it if the pool is closed).
func (p *connPool) giveBack(conn net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		conn.Close()
		return
	}
	p.idle = append(p.idle, conn)
}

// close closes every idle connection; later takes fail.
func (p *connPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, conn := range p.idle {
		conn.Close()
	}
	p.idle = nil
}

// localHost is the local address of an idle connection, or "".
func (p *connPool) localHost() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, conn := range p.idle {
		if host, _, err := net.SplitHostPort(conn.LocalAddr().String()); err == nil {
			return host
		}
	}
	return ""
}
