package pjrtkv

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/ddp/store"
)

// jobStore is a real TCP store and a client of it.
func jobStore(t *testing.T, token string) store.Store {
	t.Helper()
	srv, err := store.Listen("127.0.0.1:0", token)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	c, err := store.Dial(t.Context(), srv.Addr(), token)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestPutGetTryGet: a value round-trips; try-get says at once that a key
// is unset; another attempt of the job, or another job, sees none of it.
func TestPutGetTryGet(t *testing.T) {
	st := jobStore(t, "")
	ctx := t.Context()
	kv := New(st, "job-a", 0, "")
	require.NoError(t, kv.Put(ctx, "nccl/unique_id", []byte("id-bytes")))
	got, err := kv.Get(ctx, "nccl/unique_id")
	require.NoError(t, err)
	assert.Equal(t, []byte("id-bytes"), got)
	got, found, err := kv.TryGet(ctx, "nccl/unique_id")
	require.NoError(t, err)
	assert.True(t, found)
	assert.Equal(t, []byte("id-bytes"), got)
	require.NoError(t, kv.Put(ctx, "empty", nil))
	got, err = kv.Get(ctx, "empty")
	require.NoError(t, err)
	assert.Empty(t, got)

	for _, other := range []*Store{New(st, "job-a", 1, ""), New(st, "job-b", 0, "")} {
		_, found, err := other.TryGet(ctx, "nccl/unique_id")
		require.NoError(t, err)
		assert.False(t, found, "scope %s", other.scope)
	}
}

// TestGetWaitsAndEnds: Get waits for a key a peer puts later (once the
// getter's wait is registered in the store), and a missing key's wait
// ends with its context, the deadline passed on.
func TestGetWaitsAndEnds(t *testing.T) {
	st := jobStore(t, "")
	kv := New(st, "job", 0, "")
	got := make(chan []byte, 1)
	go func() {
		v, err := kv.Get(context.Background(), "late")
		assert.NoError(t, err)
		got <- v
	}()
	select {
	case v := <-got:
		t.Fatalf("Get returned %q before the key was put", v)
	default:
	}
	require.NoError(t, kv.Put(t.Context(), "late", []byte("here")))
	assert.Equal(t, []byte("here"), <-got)

	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err := kv.Get(ctx, "never")
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}

// TestHostileValuesRefused: what a peer writes to the store by hand under
// a served key is refused by name, never handed on: bytes with no seal,
// a seal copied from another key or attempt, a seal made without the
// job's token, a value over MaxValue; and a put over MaxValue is refused
// before it reaches the store.
func TestHostileValuesRefused(t *testing.T) {
	st := jobStore(t, "s3cret")
	ctx := t.Context()
	kv := New(st, "job", 2, "s3cret")
	require.NoError(t, kv.Put(ctx, "a", []byte("value of a")))
	sealedA, err := st.Get(ctx, kv.scope+"a")
	require.NoError(t, err)

	for _, tc := range []struct {
		name  string
		raw   []byte
		wants string
	}{
		{"raw bytes", []byte("forged"), "not written by this job's key-value callbacks"},
		{"empty", nil, "not written by this job's key-value callbacks"},
		{"magic alone", magic, "not written by this job's key-value callbacks"},
		{"copied from another key", sealedA, "sealed for another key, attempt or job"},
		{"from another attempt", New(st, "job", 1, "s3cret").seal("b", []byte("x")), "sealed for another key, attempt or job"},
		{"without the token", New(st, "job", 2, "").seal("b", []byte("x")), "sealed for another key, attempt or job"},
		{"oversized", append(append([]byte(nil), magic...), bytes.Repeat([]byte{1}, MaxValue+sha256Size+1)...), "over 8388608"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, st.Set(ctx, kv.scope+"b", tc.raw))
			_, err := kv.Get(ctx, "b")
			assert.ErrorIs(t, err, ErrRefused)
			assert.ErrorContains(t, err, tc.wants)
			_, found, err := kv.TryGet(ctx, "b")
			assert.False(t, found)
			assert.ErrorIs(t, err, ErrRefused)
		})
	}
	err = kv.Put(ctx, "big", make([]byte, MaxValue+1))
	assert.ErrorIs(t, err, ErrRefused)
	there, err := st.Check(ctx, kv.scope+"big")
	require.NoError(t, err)
	assert.False(t, there[0], "an oversized put never reaches the store")
}

// TestConcurrentCallbacks: the plugin calls from its own threads: puts
// and gets of many keys at once each see their own value.
func TestConcurrentCallbacks(t *testing.T) {
	kv := New(jobStore(t, ""), "job", 0, "")
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			key, value := fmt.Sprintf("k%d", i), bytes.Repeat([]byte{byte(i)}, i+1)
			assert.NoError(t, kv.Put(t.Context(), key, value))
			got, err := kv.Get(t.Context(), key)
			assert.NoError(t, err)
			assert.Equal(t, value, got)
		})
	}
	wg.Wait()
}

const sha256Size = 32
