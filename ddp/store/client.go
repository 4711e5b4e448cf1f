package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"
)

// Client talks to a TCP store server. Its methods are safe for concurrent
// use: each call takes an idle connection or opens (and authenticates) a
// new one, so a Get blocked on a missing key does not hold up a Set from
// another goroutine of the same process.
type Client struct {
	addr, token string
	connPool
}

// dialRetryInterval paces reconnection attempts while the server starts.
const dialRetryInterval = 100 * time.Millisecond

// Dial connects to the server at addr, retrying until ctx ends (the server
// may start after its clients), and authenticates with token.
func Dial(ctx context.Context, addr, token string) (*Client, error) {
	c := &Client{addr: addr, token: token}
	if err := c.start(ctx, c.connect); err != nil {
		return nil, err
	}
	return c, nil
}

// connect opens and authenticates one connection, retrying until ctx ends
// (also when the server dropped the handshake: under a flood of silent
// connections it closes the oldest pending ones).
func (c *Client) connect(ctx context.Context) (net.Conn, error) {
	for {
		conn, err := dialRetry(ctx, c.addr, "the store", "is MASTER_ADDR/MASTER_PORT right, and is rank 0 running?")
		if err != nil {
			return nil, err
		}
		err = c.authenticate(ctx, conn)
		if err == nil {
			return conn, nil
		}
		conn.Close()
		if !errors.Is(err, errHandshakeDropped) || ctx.Err() != nil {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(dialRetryInterval):
		}
	}
}

// errHandshakeDropped: the connection broke during the handshake.
var errHandshakeDropped = errors.New("the server dropped the handshake")

// dialRetry connects to addr, retrying a refused connection (the server
// may still be starting) until ctx ends; what and hint name the server
// and the likely cause in the error.
func dialRetry(ctx context.Context, addr, what, hint string) (net.Conn, error) {
	for {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return conn, nil
		}
		var dnsErr *net.DNSError
		if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
			// A refused connection may mean the server is still starting;
			// a name that does not exist will not start to.
			return nil, fmt.Errorf("store: the store's host %q does not resolve (%v): check MASTER_ADDR or the init method's host",
				dnsErr.Name, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("store: cannot reach %s at %s: %v (%s): %w", what, addr, err, hint, ctx.Err())
		case <-time.After(dialRetryInterval):
		}
	}
}

func (c *Client) authenticate(ctx context.Context, conn net.Conn) error {
	token := c.token
	_ = conn.SetDeadline(deadline(ctx))
	defer conn.SetDeadline(time.Time{})
	nonce, err := readFrame(conn)
	if err != nil {
		return fmt.Errorf("store: handshake with %s: %w (%w)", c.addr, errHandshakeDropped, err)
	}
	answer := make([]byte, sha256Size)
	if token != "" {
		answer = proof([]byte(token), nonce)
	}
	if err := writeFrame(conn, answer); err != nil {
		return fmt.Errorf("store: handshake with %s: %w (%w)", c.addr, errHandshakeDropped, err)
	}
	status, err := readFrame(conn)
	if err != nil {
		return fmt.Errorf("store: handshake with %s: %w (%w)", c.addr, errHandshakeDropped, err)
	}
	if len(status) == 0 || status[0] != statusOK {
		return fmt.Errorf("store: %s refused the connection: %s", c.addr, string(status[min(1, len(status)):]))
	}
	return nil
}

const sha256Size = 32

// Close closes every connection.
func (c *Client) Close() error {
	c.close()
	return nil
}

func (c *Client) call(ctx context.Context, payload []byte) ([]byte, error) {
	conn, err := c.take(ctx)
	if err != nil {
		return nil, err
	}
	// The server answers a timed-out wait by itself; allow it a moment more.
	_ = conn.SetDeadline(deadline(ctx).Add(5 * time.Second))
	resp, err := func() ([]byte, error) {
		if err := writeFrame(conn, payload); err != nil {
			return nil, err
		}
		return readFrame(conn)
	}()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("%w: the connection to %s broke: %w", ErrConnectionLost, c.addr, err)
	}
	c.giveBack(conn)
	if len(resp) == 0 {
		return nil, fmt.Errorf("store: empty response from %s", c.addr)
	}
	switch resp[0] {
	case statusOK:
		return resp[1:], nil
	case statusTimeout:
		r := &reader{buf: resp[1:]}
		missing := r.keys()
		return nil, &TimeoutError{Where: c.addr, Missing: missing}
	default:
		return nil, fmt.Errorf("store: %s: %s", c.addr, string(resp[1:]))
	}
}

// timeoutMillis is how long the server may wait for ctx's deadline.
func timeoutMillis(ctx context.Context) int64 {
	return max(0, time.Until(deadline(ctx)).Milliseconds())
}

// Set stores value under key.
func (c *Client) Set(ctx context.Context, key string, value []byte) error {
	_, err := c.call(ctx, (&encoder{buf: []byte{opSet}}).str(key).bytes(value).buf)
	return err
}

// Get returns key's value, waiting for it until ctx's deadline (or DefaultTimeout).
func (c *Client) Get(ctx context.Context, key string) ([]byte, error) {
	resp, err := c.call(ctx, (&encoder{buf: []byte{opGet}}).str(key).int64(timeoutMillis(ctx)).buf)
	if err != nil {
		return nil, err
	}
	r := &reader{buf: resp}
	v := r.bytes()
	return v, r.err
}

// Add adds delta to the counter at key and returns the new value.
func (c *Client) Add(ctx context.Context, key string, delta int64) (int64, error) {
	resp, err := c.call(ctx, (&encoder{buf: []byte{opAdd}}).str(key).int64(delta).buf)
	if err != nil {
		return 0, err
	}
	r := &reader{buf: resp}
	v := r.int64()
	return v, r.err
}

// CompareSet sets key to desired if it holds expected (missing matches
// empty) and returns the value after.
func (c *Client) CompareSet(ctx context.Context, key string, expected, desired []byte) ([]byte, error) {
	resp, err := c.call(ctx, (&encoder{buf: []byte{opCompareSet}}).str(key).bytes(expected).bytes(desired).buf)
	if err != nil {
		return nil, err
	}
	r := &reader{buf: resp}
	v := r.bytes()
	return v, r.err
}

func keyList(ctx context.Context, op byte, keys []string) []byte {
	e := &encoder{buf: []byte{op}}
	e.int64(timeoutMillis(ctx)).int64(int64(len(keys)))
	for _, k := range keys {
		e.str(k)
	}
	return e.buf
}

// Wait returns once every key exists, or an ErrTimeout naming the missing ones.
func (c *Client) Wait(ctx context.Context, keys ...string) error {
	_, err := c.call(ctx, keyList(ctx, opWait, keys))
	return err
}

// Check reports which keys exist now.
func (c *Client) Check(ctx context.Context, keys ...string) ([]bool, error) {
	resp, err := c.call(ctx, keyList(ctx, opCheck, keys))
	if err != nil {
		return nil, err
	}
	if len(resp) != len(keys) {
		return nil, fmt.Errorf("store: %s answered %d flags for %d keys", c.addr, len(resp), len(keys))
	}
	out := make([]bool, len(keys))
	for i, b := range resp {
		out[i] = b == 1
	}
	return out, nil
}

// Delete removes key and reports whether it existed.
func (c *Client) Delete(ctx context.Context, key string) (bool, error) {
	resp, err := c.call(ctx, (&encoder{buf: []byte{opDelete}}).str(key).buf)
	if err != nil {
		return false, err
	}
	return len(resp) == 8 && binary.BigEndian.Uint64(resp) == 1, nil
}

// NumKeys returns the number of keys.
func (c *Client) NumKeys(ctx context.Context) (int64, error) {
	resp, err := c.call(ctx, []byte{opNumKeys})
	if err != nil {
		return 0, err
	}
	r := &reader{buf: resp}
	v := r.int64()
	return v, r.err
}

var _ Store = (*Client)(nil)

// LocalHost returns the address this client reaches the server from (the
// address of this host on the network the server sees), or "" when no
// connection is open.
func (c *Client) LocalHost() string { return c.localHost() }
