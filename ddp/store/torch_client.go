package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// TorchClient is a client of PyTorch's c10d TCPStore, for workers that
// torchrun (torch >= 2) starts: its agent hosts that store on MASTER_PORT
// and tells the workers so with TORCHELASTIC_USE_AGENT_STORE=True. It
// speaks the store's binary protocol (a query type byte, then
// length-prefixed keys and values and fixed-size integers, in the host's
// byte order, little-endian here) and keeps every key under a prefix, as
// torch's workers keep theirs under "/worker/attempt_N/". Connections are
// pooled as Client's are, so a blocked Wait holds up nothing else.
type TorchClient struct {
	addr, prefix string
	connPool
}

// The c10d TCPStore query types and constants.
const (
	torchValidate   byte = 0
	torchSet        byte = 1
	torchCompareSet byte = 2
	torchGet        byte = 3
	torchAdd        byte = 4
	torchCheck      byte = 5
	torchWait       byte = 6
	torchNumKeys    byte = 7
	torchDelete     byte = 8
	torchCancelWait byte = 12

	torchMagic       uint32 = 0x3C85F7CE
	torchReady       byte   = 0
	torchStopWaiting byte   = 0
	torchWaitCancel  byte   = 1
)

// DialTorch connects to the c10d TCPStore at addr (retrying until ctx
// ends, as the agent may still be starting it), keeping keys under prefix.
func DialTorch(ctx context.Context, addr, prefix string) (*TorchClient, error) {
	c := &TorchClient{addr: addr, prefix: prefix}
	if err := c.start(ctx, c.connect); err != nil {
		return nil, err
	}
	return c, nil
}

// connect opens one connection and validates it, as torch's clients do.
func (c *TorchClient) connect(ctx context.Context) (net.Conn, error) {
	conn, err := dialRetry(ctx, c.addr, "torch's store", "is torchrun's agent running?")
	if err != nil {
		return nil, err
	}
	msg := binary.LittleEndian.AppendUint32([]byte{torchValidate}, torchMagic)
	_ = conn.SetWriteDeadline(deadline(ctx))
	if _, err := conn.Write(msg); err != nil {
		conn.Close()
		return nil, fmt.Errorf("%w: validating with torch's store at %s: %w", ErrConnectionLost, c.addr, err)
	}
	return conn, nil
}

// Close closes every idle connection.
func (c *TorchClient) Close() error {
	c.close()
	return nil
}

// query sends one request and reads its answer with read, on a pooled
// connection; a broken connection is dropped.
func (c *TorchClient) query(ctx context.Context, req []byte, read func(conn net.Conn) error) error {
	conn, err := c.take(ctx)
	if err != nil {
		return err
	}
	_ = conn.SetDeadline(deadline(ctx))
	err = func() error {
		if _, err := conn.Write(req); err != nil {
			return err
		}
		if read == nil {
			return nil
		}
		return read(conn)
	}()
	if err != nil {
		conn.Close()
		return fmt.Errorf("%w: torch's store at %s: %w", ErrConnectionLost, c.addr, err)
	}
	c.giveBack(conn)
	return nil
}

func torchString(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint64(b, uint64(len(s)))
	return append(b, s...)
}

// maxTorchValue bounds a value the store sends before it is allocated.
const maxTorchValue = MaxMessageSize

func readTorchBytes(conn net.Conn) ([]byte, error) {
	var n [8]byte
	if _, err := io.ReadFull(conn, n[:]); err != nil {
		return nil, err
	}
	size := binary.LittleEndian.Uint64(n[:])
	if size > maxTorchValue {
		return nil, fmt.Errorf("a %d-byte value, over the %d-byte limit", size, maxTorchValue)
	}
	v := make([]byte, size)
	_, err := io.ReadFull(conn, v)
	return v, err
}

func readTorchInt64(conn net.Conn) (int64, error) {
	var b [8]byte
	_, err := io.ReadFull(conn, b[:])
	return int64(binary.LittleEndian.Uint64(b[:])), err
}

func readTorchByte(conn net.Conn) (byte, error) {
	var b [1]byte
	_, err := io.ReadFull(conn, b[:])
	return b[0], err
}

// Set stores value under key.
func (c *TorchClient) Set(ctx context.Context, key string, value []byte) error {
	req := torchString([]byte{torchSet}, c.prefix+key)
	req = torchString(req, string(value))
	return c.query(ctx, req, nil)
}

// Get waits for key, then returns its value.
func (c *TorchClient) Get(ctx context.Context, key string) ([]byte, error) {
	if err := c.Wait(ctx, key); err != nil {
		return nil, err
	}
	var v []byte
	err := c.query(ctx, torchString([]byte{torchGet}, c.prefix+key), func(conn net.Conn) error {
		var err error
		v, err = readTorchBytes(conn)
		return err
	})
	return v, err
}

// Add adds delta to the counter at key and returns the new value.
func (c *TorchClient) Add(ctx context.Context, key string, delta int64) (int64, error) {
	req := binary.LittleEndian.AppendUint64(torchString([]byte{torchAdd}, c.prefix+key), uint64(delta))
	var v int64
	err := c.query(ctx, req, func(conn net.Conn) error {
		var err error
		v, err = readTorchInt64(conn)
		return err
	})
	return v, err
}

// CompareSet sets key to desired if it holds expected (a missing key
// matches an empty expected) and returns the value after.
func (c *TorchClient) CompareSet(ctx context.Context, key string, expected, desired []byte) ([]byte, error) {
	req := torchString([]byte{torchCompareSet}, c.prefix+key)
	req = torchString(req, string(expected))
	req = torchString(req, string(desired))
	var v []byte
	err := c.query(ctx, req, func(conn net.Conn) error {
		var err error
		v, err = readTorchBytes(conn)
		return err
	})
	return v, err
}

func (c *TorchClient) keyList(op byte, keys []string) []byte {
	req := binary.LittleEndian.AppendUint64([]byte{op}, uint64(len(keys)))
	for _, k := range keys {
		req = torchString(req, c.prefix+k)
	}
	return req
}

// Wait returns once every key exists; at ctx's deadline it cancels the
// wait on the server and returns a TimeoutError.
func (c *TorchClient) Wait(ctx context.Context, keys ...string) error {
	conn, err := c.take(ctx)
	if err != nil {
		return err
	}
	end := deadline(ctx)
	_ = conn.SetWriteDeadline(end)
	if _, err := conn.Write(c.keyList(torchWait, keys)); err != nil {
		conn.Close()
		return fmt.Errorf("%w: torch's store at %s: %w", ErrConnectionLost, c.addr, err)
	}
	_ = conn.SetReadDeadline(end)
	b, err := readTorchByte(conn)
	if err == nil && b == torchStopWaiting {
		c.giveBack(conn)
		return nil
	}
	var ne net.Error
	if err == nil || !errors.As(err, &ne) || !ne.Timeout() {
		conn.Close()
		return fmt.Errorf("%w: torch's store at %s answered a wait with %d (%v)", ErrConnectionLost, c.addr, b, err)
	}
	// Cancel the wait; the answer may cross with the keys arriving.
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte{torchCancelWait}); err != nil {
		conn.Close()
		return &TimeoutError{Where: c.addr, Missing: keys}
	}
	for {
		b, err := readTorchByte(conn)
		if err != nil {
			conn.Close()
			break
		}
		if b == torchWaitCancel {
			c.giveBack(conn)
			break
		}
	}
	return &TimeoutError{Where: c.addr, Missing: keys}
}

// Check reports which keys exist (torch answers for a whole list; one
// query per key gives each its answer).
func (c *TorchClient) Check(ctx context.Context, keys ...string) ([]bool, error) {
	out := make([]bool, len(keys))
	for i, k := range keys {
		err := c.query(ctx, c.keyList(torchCheck, []string{k}), func(conn net.Conn) error {
			b, err := readTorchByte(conn)
			out[i] = b == torchReady
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Delete removes key and reports whether it existed.
func (c *TorchClient) Delete(ctx context.Context, key string) (bool, error) {
	var n int64
	err := c.query(ctx, torchString([]byte{torchDelete}, c.prefix+key), func(conn net.Conn) error {
		var err error
		n, err = readTorchInt64(conn)
		return err
	})
	return n == 1, err
}

// NumKeys returns how many keys the store holds (all of them, not only
// this client's prefix: torch's store counts them so).
func (c *TorchClient) NumKeys(ctx context.Context) (int64, error) {
	var n int64
	err := c.query(ctx, []byte{torchNumKeys}, func(conn net.Conn) error {
		var err error
		n, err = readTorchInt64(conn)
		return err
	})
	return n, err
}
