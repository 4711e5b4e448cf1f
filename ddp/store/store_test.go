package store

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stores returns a fresh TCP client and file store for the same test.
func stores(t *testing.T) map[string]func(t *testing.T) Store {
	return map[string]func(t *testing.T) Store{
		"tcp": func(t *testing.T) Store {
			srv, err := Listen("127.0.0.1:0", "")
			require.NoError(t, err)
			t.Cleanup(func() { srv.Close() })
			c, err := Dial(context.Background(), srv.Addr(), "")
			require.NoError(t, err)
			t.Cleanup(func() { c.Close() })
			return c
		},
		"file": func(t *testing.T) Store {
			f, err := OpenFileStore(context.Background(), filepath.Join(t.TempDir(), "init"))
			require.NoError(t, err)
			return f
		},
	}
}

func ctxWithTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestStoreOperations(t *testing.T) {
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			s := open(t)
			ctx := ctxWithTimeout(t, 10*time.Second)
			require.NoError(t, s.Set(ctx, "a", []byte("1")))
			v, err := s.Get(ctx, "a")
			require.NoError(t, err)
			assert.Equal(t, []byte("1"), v)

			n, err := s.Add(ctx, "counter", 5)
			require.NoError(t, err)
			assert.EqualValues(t, 5, n)
			n, err = s.Add(ctx, "counter", -2)
			require.NoError(t, err)
			assert.EqualValues(t, 3, n)
			_, err = s.Add(ctx, "a", 1)
			require.NoError(t, err, "a numeric string value counts")
			require.NoError(t, s.Set(ctx, "word", []byte("x")))
			_, err = s.Add(ctx, "word", 1)
			assert.ErrorContains(t, err, `Add on key "word" holding non-integer "x"`)

			after, err := s.CompareSet(ctx, "cas", nil, []byte("first"))
			require.NoError(t, err)
			assert.Equal(t, []byte("first"), after, "a missing key matches empty expected")
			after, err = s.CompareSet(ctx, "cas", []byte("wrong"), []byte("second"))
			require.NoError(t, err)
			assert.Equal(t, []byte("first"), after, "a mismatch leaves the value")
			after, err = s.CompareSet(ctx, "cas", []byte("first"), []byte("second"))
			require.NoError(t, err)
			assert.Equal(t, []byte("second"), after)

			present, err := s.Check(ctx, "a", "nope")
			require.NoError(t, err)
			assert.Equal(t, []bool{true, false}, present)
			keys, err := s.NumKeys(ctx)
			require.NoError(t, err)
			assert.EqualValues(t, 4, keys)
			found, err := s.Delete(ctx, "a")
			require.NoError(t, err)
			assert.True(t, found)
			found, err = s.Delete(ctx, "a")
			require.NoError(t, err)
			assert.False(t, found)

			go func() {
				time.Sleep(50 * time.Millisecond)
				_ = s.Set(context.Background(), "late", []byte("here"))
			}()
			v, err = s.Get(ctx, "late")
			require.NoError(t, err)
			assert.Equal(t, []byte("here"), v, "Get waits for the key")

			short := ctxWithTimeout(t, 200*time.Millisecond)
			start := time.Now()
			err = s.Wait(short, "late", "never", "nor-this")
			assert.ErrorIs(t, err, ErrTimeout)
			assert.Contains(t, err.Error(), `["never" "nor-this"]`)
			assert.Less(t, time.Since(start), 2*time.Second)
		})
	}
}

func TestConcurrentAdd(t *testing.T) {
	srv, err := Listen("127.0.0.1:0", "")
	require.NoError(t, err)
	defer srv.Close()
	dir := t.TempDir()
	opens := map[string]func() (Store, error){
		"tcp":  func() (Store, error) { return Dial(context.Background(), srv.Addr(), "") },
		"file": func() (Store, error) { return OpenFileStore(context.Background(), filepath.Join(dir, "init")) },
	}
	for name, open := range opens {
		t.Run(name, func(t *testing.T) {
			const clients, adds = 8, 25
			var wg sync.WaitGroup
			for range clients {
				s, err := open()
				require.NoError(t, err)
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range adds {
						_, err := s.Add(context.Background(), "n", 1)
						assert.NoError(t, err)
					}
				}()
			}
			wg.Wait()
			s, err := open()
			require.NoError(t, err)
			n, err := s.Add(context.Background(), "n", 0)
			require.NoError(t, err)
			assert.EqualValues(t, clients*adds, n, "no lost updates")
		})
	}
}

func TestTCPErrors(t *testing.T) {
	srv, err := Listen("127.0.0.1:0", "")
	require.NoError(t, err)
	defer srv.Close()
	_, err = Listen(srv.Addr(), "")
	assert.ErrorContains(t, err, "cannot listen on "+srv.Addr())
	assert.ErrorContains(t, err, "pick another MASTER_PORT")

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closedAddr := ln.Addr().String()
	ln.Close()
	start := time.Now()
	_, err = Dial(ctxWithTimeout(t, 300*time.Millisecond), closedAddr, "")
	assert.ErrorContains(t, err, "cannot reach the store at "+closedAddr)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), 2*time.Second)
}

// TestToken: with a token set, a client without it, or with another, is
// refused before it can run any command; the right one works.
func TestToken(t *testing.T) {
	srv, err := Listen("127.0.0.1:0", "s3cret")
	require.NoError(t, err)
	defer srv.Close()
	ctx := ctxWithTimeout(t, 5*time.Second)
	for _, token := range []string{"", "wrong"} {
		t.Run(fmt.Sprintf("token %q", token), func(t *testing.T) {
			_, err := Dial(ctx, srv.Addr(), token)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "refused the connection: store: authentication failed")
		})
	}
	// A raw client skipping the handshake cannot issue commands either.
	raw, err := net.Dial("tcp", srv.Addr())
	require.NoError(t, err)
	defer raw.Close()
	_, err = readFrame(raw) // the challenge
	require.NoError(t, err)
	require.NoError(t, writeFrame(raw, (&encoder{buf: []byte{opNumKeys}}).buf))
	resp, err := readFrame(raw)
	require.NoError(t, err)
	assert.Equal(t, statusError, resp[0])
	good, err := Dial(ctx, srv.Addr(), "s3cret")
	require.NoError(t, err)
	defer good.Close()
	require.NoError(t, good.Set(ctx, "k", []byte("v")))
	n, err := good.NumKeys(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 1, n)
}

func TestMalformedRequests(t *testing.T) {
	for _, tc := range []struct {
		payload []byte
		want    string
	}{
		{nil, "empty request"},
		{[]byte{99}, "unknown operation 99"},
		{[]byte{opSet, 0, 0, 0, 9, 'a'}, "malformed request (op 1): field of 9 bytes with 1 left"},
		{(&encoder{buf: []byte{opWait}}).int64(10).int64(-1).buf, "key count -1 outside"},
		{append((&encoder{buf: []byte{opDelete}}).str("k").buf, 7), "1 trailing bytes"},
	} {
		_, err := decodeRequest(tc.payload)
		assert.ErrorContains(t, err, tc.want)
	}
}

// FuzzDecodeRequest: no payload may panic or make the decoder allocate
// beyond its input.
func FuzzDecodeRequest(f *testing.F) {
	f.Add((&encoder{buf: []byte{opSet}}).str("key").bytes([]byte("value")).buf)
	f.Add(keyList(context.Background(), opWait, []string{"a", "b"}))
	f.Add((&encoder{buf: []byte{opCompareSet}}).str("k").bytes(nil).bytes([]byte("x")).buf)
	f.Fuzz(func(t *testing.T, payload []byte) {
		req, err := decodeRequest(payload)
		if err == nil && len(req.keys) > len(payload) {
			t.Fatalf("%d keys decoded from %d bytes", len(req.keys), len(payload))
		}
	})
}
