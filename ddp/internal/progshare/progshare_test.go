package progshare

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/ddp/store"
)

// exchanges are world Exchanges, each over its own connection to
// one real store on loopback, beating every 20 ms and passing a silent
// claimant after 300 ms.
func exchanges(t *testing.T, world int) []*Exchange {
	return exchangesPassingAfter(t, world, 300*time.Millisecond)
}

// exchangesPassingAfter are exchanges passing a silent claimant after
// stall.
func exchangesPassingAfter(t *testing.T, world int, stall time.Duration) []*Exchange {
	t.Helper()
	srv, err := store.Listen("127.0.0.1:0", "")
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	out := make([]*Exchange, world)
	for r := range world {
		c, err := store.Dial(t.Context(), srv.Addr(), "")
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		out[r] = &Exchange{st: c, rank: r, world: world, beat: 20 * time.Millisecond, stall: stall}
	}
	return out
}

func program(size int) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(i*31 + i>>16)
	}
	return b
}

// TestStoreExchangeSharesOneCompilation: of 8 processes claiming a
// program at once, exactly one compiles; the others wait for it while it
// compiles, then take its 20 MiB (two chunks) byte for byte; the last
// of them frees the chunks from the store. The others wait a minute for
// a silent compiler, as a job does: a loaded machine delays the beats.
func TestStoreExchangeSharesOneCompilation(t *testing.T) {
	xs := exchangesPassingAfter(t, 8, time.Minute)
	file := program(20 << 20)
	var firsts int
	var mu sync.Mutex
	got := make([][]byte, len(xs))
	var wg sync.WaitGroup
	for i, x := range xs {
		wg.Go(func() {
			first, done, err := x.Claim(t.Context(), "p")
			require.NoError(t, err)
			if first {
				mu.Lock()
				firsts++
				mu.Unlock()
				time.Sleep(200 * time.Millisecond) // compiling, beating
				done(file)
				return
			}
			got[i], err = x.Fetch(t.Context(), "p")
			require.NoError(t, err)
		})
	}
	wg.Wait()
	assert.Equal(t, 1, firsts)
	fetched := 0
	for _, g := range got {
		if g != nil {
			fetched++
			assert.True(t, bytes.Equal(file, g))
		}
	}
	assert.Equal(t, 7, fetched)
	found, err := xs[0].st.Check(t.Context(), programKey("p", "chunk/0"), programKey("p", "chunk/1"))
	require.NoError(t, err)
	assert.Equal(t, []bool{false, false}, found, "the chunks are freed once all took them")
	_, err = xs[0].Fetch(t.Context(), "p")
	assert.ErrorContains(t, err, "no longer holds it", "a latecomer compiles for itself")
}

// TestStoreExchangeRefusesWhatWasNotPublished: a withdrawn program, a
// silent compiler, a manifest that lies about the size or chunk count, a
// chunk of the wrong length, and bytes that do not match the sha256 are
// each an error, never a program.
func TestStoreExchangeRefusesWhatWasNotPublished(t *testing.T) {
	file := program(3 << 20)
	publish := func(t *testing.T, xs []*Exchange) {
		require.NoError(t, xs[0].publish(t.Context(), "p", file))
	}
	setManifest := func(t *testing.T, x *Exchange, m manifest) {
		raw, err := json.Marshal(m)
		require.NoError(t, err)
		require.NoError(t, x.st.Set(t.Context(), programKey("p", "manifest"), raw))
	}
	for _, tc := range []struct {
		name string
		seed func(t *testing.T, xs []*Exchange)
		want string
	}{
		{"withdrawn", func(t *testing.T, xs []*Exchange) {
			xs[0].withdraw(t.Context(), "p", "its compilation failed here")
		}, "rank 0, which compiled it first, did not publish it: its compilation failed here"},
		{"a silent compiler", func(*testing.T, []*Exchange) {}, "has not been heard from for"},
		{"a huge size", func(t *testing.T, xs []*Exchange) {
			setManifest(t, xs[0], manifest{Size: 1 << 40, Chunks: chunksOf(1 << 40), SHA256: make([]byte, 32)})
		}, "not one a process publishes"},
		{"the wrong chunk count", func(t *testing.T, xs []*Exchange) {
			setManifest(t, xs[0], manifest{Size: 100, Chunks: 3, SHA256: make([]byte, 32)})
		}, "not one a process publishes"},
		{"a size with no chunks behind it", func(t *testing.T, xs []*Exchange) {
			setManifest(t, xs[0], manifest{Size: maxSharedProgram, Chunks: chunksOf(maxSharedProgram), SHA256: make([]byte, 32)})
		}, "names 128 chunks (2147483648 bytes), and the store lacks 128 of them (the first: 0)"},
		{"one chunk missing", func(t *testing.T, xs []*Exchange) {
			publish(t, xs)
			_, err := xs[0].st.Delete(t.Context(), programKey("p", "chunk/0"))
			require.NoError(t, err)
		}, "the store lacks 1 of them (the first: 0)"},
		{"a short chunk", func(t *testing.T, xs []*Exchange) {
			publish(t, xs)
			require.NoError(t, xs[0].st.Set(t.Context(), programKey("p", "chunk/0"), file[:10]))
		}, "chunk 0 has 10 bytes, the manifest 3145728"},
		{"flipped bytes", func(t *testing.T, xs []*Exchange) {
			publish(t, xs)
			bad := bytes.Clone(file)
			bad[12345] ^= 1
			require.NoError(t, xs[0].st.Set(t.Context(), programKey("p", "chunk/0"), bad))
		}, "do not match the sha256 rank 0 published"},
		{"a manifest that is not JSON", func(t *testing.T, xs []*Exchange) {
			require.NoError(t, xs[0].st.Set(t.Context(), programKey("p", "manifest"), []byte("{")))
		}, "its manifest"},
		{"a huge manifest", func(t *testing.T, xs []*Exchange) {
			require.NoError(t, xs[0].st.Set(t.Context(), programKey("p", "manifest"), bytes.Repeat([]byte(" "), 1<<20)))
		}, "its manifest is 1048576 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			xs := exchanges(t, 2)
			_, err := xs[0].st.Add(t.Context(), programKey("p", "claim"), 1) // rank 0 claims it
			require.NoError(t, err)
			tc.seed(t, xs)
			first, _, err := xs[1].Claim(t.Context(), "p")
			require.NoError(t, err)
			require.False(t, first)
			start := time.Now()
			_, err = xs[1].Fetch(t.Context(), "p")
			assert.ErrorContains(t, err, tc.want)
			assert.Less(t, time.Since(start), 5*time.Second)
		})
	}
}

// TestStoreExchangeFetchEndsWithItsContext: a fetch waiting on a live
// compiler ends when its context does.
func TestStoreExchangeFetchEndsWithItsContext(t *testing.T) {
	xs := exchanges(t, 2)
	_, done, err := xs[0].Claim(t.Context(), "p")
	require.NoError(t, err)
	defer done(nil)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err = xs[1].Fetch(ctx, "p")
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}
