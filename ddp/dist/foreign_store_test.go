package dist

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/ddp/store"
	"github.com/xladdp/xladdp/internal/workerenv"
)

// TestForeignStoreValuesAreCut: what another process left in the store
// (here 4 MiB under this rank's key) is quoted and cut short in the
// error, not echoed whole.
func TestForeignStoreValuesAreCut(t *testing.T) {
	srv, err := store.Listen("127.0.0.1:0", "")
	require.NoError(t, err)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	c, err := store.Dial(ctx, srv.Addr(), "")
	require.NoError(t, err)
	require.NoError(t, c.Set(ctx, "rank/1", []byte(strings.Repeat("x", 4<<20)+"\nforged line")))
	c.Close()

	o := NewOptions()
	o.Rank, o.WorldSize, o.InitMethod, o.Timeout = 1, 2, "tcp://"+srv.Addr(), 10*time.Second
	_, err = InitProcessGroup(ctx, o)
	require.ErrorContains(t, err, "rank 1 is claimed twice: by \"xxxx")
	assert.Contains(t, err.Error(), "… (4194316 bytes)")
	assert.Less(t, len(err.Error()), 1000)
	assert.NotContains(t, err.Error(), "\nforged")
}

// TestAgentStoreLossNamesTorchrun: with torchrun's agent store (torch >=
// 2), a store that goes away is torchrun's, not rank 0's.
func TestAgentStoreLossNamesTorchrun(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			// Take the validation message, then hang up, as a store
			// whose torchrun exited.
			_, _ = io.ReadFull(conn, make([]byte, 5))
			conn.Close()
		}
	}()
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	t.Setenv(workerenv.AgentStore, "True")
	t.Setenv(EnvMasterAddr, host)
	t.Setenv(EnvMasterPort, port)
	o := NewOptions()
	o.Rank, o.WorldSize, o.Timeout = 1, 2, 5*time.Second
	_, err = InitProcessGroup(t.Context(), o)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the store is hosted by torchrun's agent on MASTER_PORT: did torchrun exit?")
	assert.NotContains(t, err.Error(), "hosted by rank 0")
}
