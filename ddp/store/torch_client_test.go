package store

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// exchange is one request of n bytes and the fake store's reply.
type exchange struct {
	n     int
	reply []byte
}

// fakeTorchStore accepts one connection, checks the validation message,
// then plays script (and closes).
func fakeTorchStore(t *testing.T, script ...exchange) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		hello := make([]byte, 5)
		if _, err := io.ReadFull(conn, hello); err != nil || hello[0] != torchValidate || binary.LittleEndian.Uint32(hello[1:]) != torchMagic {
			return
		}
		for _, x := range script {
			req := make([]byte, x.n)
			if _, err := io.ReadFull(conn, req); err != nil {
				return
			}
			_, _ = conn.Write(x.reply)
		}
	}()
	return ln.Addr().String()
}

// TestTorchClientRefusesHostileReplies: a value length beyond the limit
// is refused before it is allocated, and a store that hangs up mid-answer
// is ErrConnectionLost, not a hang.
func TestTorchClientRefusesHostileReplies(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	// GET: [3][u64 len][key]; WAIT first: [6][u64 1][u64 len][key].
	huge := binary.LittleEndian.AppendUint64(nil, 1<<62)
	addr := fakeTorchStore(t, exchange{1 + 8 + 8 + len("p/k"), []byte{torchStopWaiting}}, exchange{1 + 8 + len("p/k"), huge})
	c, err := DialTorch(ctx, addr, "p/")
	require.NoError(t, err)
	_, err = c.Get(ctx, "k")
	assert.ErrorContains(t, err, "over the")
	assert.ErrorIs(t, err, ErrConnectionLost)

	addr = fakeTorchStore(t, exchange{1 + 8 + len("p/n") + 8, []byte{1, 2, 3}}) // ADD, then 3 of 8 bytes
	c, err = DialTorch(ctx, addr, "p/")
	require.NoError(t, err)
	_, err = c.Add(ctx, "n", 1)
	assert.ErrorIs(t, err, ErrConnectionLost)
}
