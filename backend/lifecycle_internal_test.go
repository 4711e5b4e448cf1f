package backend

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCloseWaitsForUsesInFlight: Close blocks until every Acquire is
// released, runs the OnClose hooks (last registered first) before the
// client goes, and every later Acquire fails with ErrClosed.
func TestCloseWaitsForUsesInFlight(t *testing.T) {
	b := openCPU(t, 1)
	var (
		mu    sync.Mutex
		order []string
	)
	note := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, s)
	}
	b.OnClose(func() { note("first hook") })
	b.OnClose(func() { note("second hook") })

	release, err := b.Acquire("upload")
	require.NoError(t, err)
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		assert.NoError(t, b.Close())
	}()
	select {
	case <-closed:
		t.Fatal("Close returned while a use was in flight")
	case <-time.After(50 * time.Millisecond):
	}
	require.Eventually(t, b.Closed, time.Second, time.Millisecond, "Close marks the backend closed at once")
	_, err = b.Acquire("compile")
	assert.ErrorIs(t, err, ErrClosed, "no new use starts once Close began")
	note("released")
	release()
	release() // a second release is harmless
	<-closed
	assert.Equal(t, []string{"released", "second hook", "first hook"}, order)
	assert.True(t, b.gomlx.IsFinalized())

	ran := false
	b.OnClose(func() { ran = true })
	assert.True(t, ran, "a hook registered after Close runs at once")
	assert.NoError(t, b.Close(), "closing twice is a no-op")
	_, err = b.Acquire("execute")
	assert.ErrorContains(t, err, "execute on cpu: backend closed")
}
