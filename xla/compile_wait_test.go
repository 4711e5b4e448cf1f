package xla

import (
	"context"
	"errors"
	"math"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// longProgram traces a chain of n matmul+tanh steps on a width×width
// input, whose XLA compilation takes seconds at n = 1200 on this
// machine's CPU; it returns the tensors that keep every sum live.
func longProgram(t *testing.T, d *Device, n, width int) []*Tensor {
	data := make([]float32, width*width)
	for i := range data {
		data[i] = float32(i%7) / 100
	}
	x := mustFromSlice(t, d, data, width, width)
	y := x
	var keep []*Tensor
	for i := range n {
		y = y.MatMul(x).Tanh()
		if i%7 == 0 {
			keep = append(keep, y.Sum())
		}
	}
	return append(keep, y)
}

// waitCompiling returns once e compiles n programs at once.
func waitCompiling(t *testing.T, e *Engine, n int) {
	deadline := time.Now().Add(time.Minute)
	for e.cache.programs.Compiling() < n {
		require.True(t, time.Now().Before(deadline), "never saw %d compilations at once", n)
		time.Sleep(time.Millisecond)
	}
}

// A MarkStep whose ctx ends while its program compiles (for seconds)
// returns within 200 ms with the cause; the compilation goes on, is
// cached, and the next MarkStep of the same trace uses it.
func TestCancelledMarkStepDuringCompileReturnsPromptly(t *testing.T) {
	e := newEngine(t, 1)
	d := e.Device(0)
	keep := longProgram(t, d, 1200, 48)
	cause := errors.New("the user pressed ^C")
	ctx, cancel := context.WithCancelCause(testContext(t))
	cancelled := make(chan time.Time, 1)
	go func() {
		waitCompiling(t, e, 1)
		time.Sleep(100 * time.Millisecond) // well into the compilation
		cancelled <- time.Now()
		cancel(cause)
	}()
	err := d.MarkStep(ctx)
	returned := time.Now()
	require.Error(t, err)
	assert.ErrorIs(t, err, cause)
	assert.ErrorContains(t, err, "compiling the program for devices[0]")
	assert.Less(t, returned.Sub(<-cancelled), 200*time.Millisecond)
	assert.Equal(t, 1, e.cache.programs.Compiling(), "the compilation outlives the wait: it took longer than the test assumes")

	before := GetMetrics()
	require.NoError(t, d.MarkStep(testContext(t)), "the device stays usable and the step runs")
	after := GetMetrics()
	assert.Equal(t, before.Compilations+1, after.Compilations, "the one compilation in flight, not a second")
	assert.Equal(t, before.CacheHits+1, after.CacheHits, "the retried step found it in the cache")
	sum, err := keep[0].Item(testContext(t))
	require.NoError(t, err)
	assert.False(t, math.IsNaN(sum))
	runtime.KeepAlive(keep)
}

// Two different programs compile at once (the cache compiles outside its
// lock): two standalone devices of one engine MarkStep different traces
// together, and the cache sees both compilations running.
func TestDifferentProgramsCompileConcurrently(t *testing.T) {
	e := newEngine(t, 2)
	keeps := [][]*Tensor{longProgram(t, e.Device(0), 900, 40), longProgram(t, e.Device(1), 900, 44)}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() { errs[i] = e.Device(i).MarkStep(testContext(t)) })
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	assert.Equal(t, 2, e.cache.programs.Peak(), "the two compilations never overlapped")
	runtime.KeepAlive(keeps)
}
