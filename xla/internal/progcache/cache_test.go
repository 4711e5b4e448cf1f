package progcache

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func lowered(compile func() (*int, error)) func() (func() (*int, error), error) {
	return func() (func() (*int, error), error) { return compile, nil }
}

// Two different programs compile at once: each compilation waits until
// the other has started, which only concurrent compilations can do.
func TestDifferentProgramsCompileAtOnce(t *testing.T) {
	c := New[*int]()
	var started sync.WaitGroup
	started.Add(2)
	compile := func(v int) func() (*int, error) {
		return func() (*int, error) {
			started.Done()
			started.Wait()
			return &v, nil
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	got := make([]int, 2)
	for i := range 2 {
		wg.Go(func() {
			p, hit, err := c.Get(ctx, Key{Fingerprint: string(rune('a' + i))}, lowered(compile(i)))
			require.NoError(t, err)
			assert.False(t, hit)
			got[i] = *p
		})
	}
	wg.Wait()
	assert.Equal(t, []int{0, 1}, got)
	assert.Equal(t, 2, c.Peak())
}

// Callers of one program share one compilation.
func TestSameProgramCompilesOnce(t *testing.T) {
	c := New[*int]()
	var lowers, compiles atomic.Int32
	release := make(chan struct{})
	lower := func() (func() (*int, error), error) {
		lowers.Add(1)
		return func() (*int, error) {
			compiles.Add(1)
			<-release
			v := 7
			return &v, nil
		}, nil
	}
	var wg sync.WaitGroup
	hits := make([]bool, 8)
	for i := range hits {
		wg.Go(func() {
			p, hit, err := c.Get(t.Context(), Key{Fingerprint: "x"}, lower)
			require.NoError(t, err)
			assert.Equal(t, 7, *p)
			hits[i] = hit
		})
	}
	time.Sleep(50 * time.Millisecond)
	close(release)
	wg.Wait()
	assert.Equal(t, int32(1), lowers.Load())
	assert.Equal(t, int32(1), compiles.Load())
	misses := 0
	for _, h := range hits {
		if !h {
			misses++
		}
	}
	assert.Equal(t, 1, misses, "one caller compiled, the others shared it")
}

// A cancelled wait returns at once with its cause; the compilation goes
// on and the next caller gets it without compiling again.
func TestCancelledWaitReturnsPromptly(t *testing.T) {
	c := New[*int]()
	release := make(chan struct{})
	var compiles atomic.Int32
	lower := lowered(func() (*int, error) {
		compiles.Add(1)
		<-release
		v := 3
		return &v, nil
	})
	cause := errors.New("the user pressed ^C")
	ctx, cancel := context.WithCancelCause(t.Context())
	time.AfterFunc(50*time.Millisecond, func() { cancel(cause) })
	start := time.Now()
	_, _, err := c.Get(ctx, Key{Fingerprint: "slow"}, lower)
	assert.Less(t, time.Since(start), time.Second)
	assert.ErrorIs(t, err, cause)
	assert.ErrorContains(t, err, "it goes on, and is cached")
	close(release)
	p, hit, err := c.Get(t.Context(), Key{Fingerprint: "slow"}, lower)
	require.NoError(t, err)
	assert.True(t, hit)
	assert.Equal(t, 3, *p)
	assert.Equal(t, int32(1), compiles.Load())
}

// A failed lowering or compilation is reported to its waiters and not
// cached; Close waits for compilations in flight and releases each
// program once; Get after Close fails.
func TestFailuresAndClose(t *testing.T) {
	c := New[*int]()
	boom := errors.New("boom")
	_, _, err := c.Get(t.Context(), Key{Fingerprint: "l"}, func() (func() (*int, error), error) { return nil, boom })
	assert.ErrorIs(t, err, boom)
	_, _, err = c.Get(t.Context(), Key{Fingerprint: "c"}, lowered(func() (*int, error) { return nil, boom }))
	assert.ErrorIs(t, err, boom)
	v := 1
	p, hit, err := c.Get(t.Context(), Key{Fingerprint: "c"}, lowered(func() (*int, error) { return &v, nil }))
	require.NoError(t, err)
	assert.False(t, hit, "the failure was not cached")
	assert.Same(t, &v, p)

	release := make(chan struct{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	w := 2
	_, _, err = c.Get(ctx, Key{Fingerprint: "late"}, lowered(func() (*int, error) { <-release; return &w, nil }))
	assert.ErrorIs(t, err, context.Canceled)
	closed := make(chan []int)
	go func() {
		var released []int
		c.Close(func(p *int) { released = append(released, *p) })
		closed <- released
	}()
	select {
	case <-closed:
		t.Fatal("Close returned while a compilation was in flight")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	assert.ElementsMatch(t, []int{1, 2}, <-closed)
	_, _, err = c.Get(t.Context(), Key{Fingerprint: "c"}, lowered(func() (*int, error) { return &v, nil }))
	assert.ErrorIs(t, err, ErrClosed)
}
