package xla

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// jobExchange is an in-process ProgramExchange, the seam's stand-in for
// a job's store (ddp's storeExchange is tested with real processes): it
// keeps what the first claimer published, counts what engines say they
// have, and lets a test tamper with what it hands out.
type jobExchange struct {
	mu        sync.Mutex
	claimed   map[string]bool
	published map[string][]byte
	had       map[string]int
	tamper    func(name string, file []byte) []byte
}

func newJobExchange() *jobExchange {
	return &jobExchange{claimed: map[string]bool{}, published: map[string][]byte{}, had: map[string]int{}}
}

func (x *jobExchange) Have(_ context.Context, name string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.had[name]++
}

// hadCount is how many times engines said they had a program of x's.
func (x *jobExchange) hadCount() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	n := 0
	for _, c := range x.had {
		n += c
	}
	return n
}

func (x *jobExchange) Claim(_ context.Context, name string) (bool, func([]byte), error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.claimed[name] {
		return false, nil, nil
	}
	x.claimed[name] = true
	return true, func(file []byte) {
		x.mu.Lock()
		defer x.mu.Unlock()
		x.published[name] = file
	}, nil
}

func (x *jobExchange) Fetch(_ context.Context, name string) ([]byte, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	file := x.published[name]
	if file == nil {
		return nil, errors.New("the first process gave up compiling it")
	}
	if x.tamper != nil {
		return x.tamper(name, file), nil
	}
	return file, nil
}

// sharedRun runs program A or B on a fresh engine without a disk cache,
// sharing through x, and reports the value and what it compiled,
// fetched and published.
func sharedRun(t *testing.T, x ProgramExchange, program string) (got []float32, compiled, fetched, published int64) {
	t.Helper()
	e := newEngine(t, 1)
	e.cache.disk.Dir = "" // the job is the only place a program comes from
	e.ShareProgramsThrough(x)
	x1 := mustFromSlice(t, e.Device(0), []float32{1, 2, 3}, 3)
	y := x1.MulScalar(2).AddScalar(1)
	if program == "B" {
		y = x1.Exp().AddScalar(1)
	}
	before := GetMetrics()
	got, err := y.Float32s(testContext(t))
	require.NoError(t, err)
	after := GetMetrics()
	return got, after.Compilations - before.Compilations, after.ProgramsFetched - before.ProgramsFetched, after.ProgramsPublished - before.ProgramsPublished
}

// TestProgramsSharedThroughTheJob: the first engine to need a program
// compiles and publishes it; another takes it and compiles nothing. A
// published file that is corrupt, truncated, of another program, or
// withdrawn after a failed compilation is never used: the engine
// compiles for itself and gets the right result.
func TestProgramsSharedThroughTheJob(t *testing.T) {
	want := []float32{3, 5, 7}
	x := newJobExchange()
	got, compiled, fetched, published := sharedRun(t, x, "A")
	require.Equal(t, want, got)
	assert.EqualValues(t, [3]int64{1, 0, 1}, [3]int64{compiled, fetched, published}, "the first compiles and publishes")
	got, compiled, fetched, published = sharedRun(t, x, "A")
	assert.Equal(t, want, got)
	assert.EqualValues(t, [3]int64{0, 1, 0}, [3]int64{compiled, fetched, published}, "the others fetch")

	var nameA string
	for name := range x.published {
		nameA = name
	}
	_, _, _, _ = sharedRun(t, x, "B")
	var fileB []byte
	for name, file := range x.published {
		if name != nameA {
			fileB = file
		}
	}
	require.NotNil(t, fileB)
	for _, tc := range []struct {
		name   string
		tamper func(name string, file []byte) []byte
	}{
		{"a flipped byte", func(_ string, f []byte) []byte {
			f = append([]byte(nil), f...)
			f[3] ^= 0xff
			return f
		}},
		{"truncated", func(_ string, f []byte) []byte { return f[:len(f)/2] }},
		{"another program's file", func(string, []byte) []byte { return fileB }},
		{"empty", func(string, []byte) []byte { return []byte{} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x.tamper = tc.tamper
			defer func() { x.tamper = nil }()
			had := x.hadCount()
			got, compiled, fetched, _ := sharedRun(t, x, "A")
			assert.Equal(t, want, got)
			assert.EqualValues(t, [2]int64{1, 0}, [2]int64{compiled, fetched}, "compiled here, nothing taken")
			assert.Equal(t, had+1, x.hadCount(), "the exchange is told it was compiled here")
		})
	}
	t.Run("withdrawn", func(t *testing.T) {
		y := newJobExchange()
		y.claimed[nameA] = true // another process claimed it and failed
		got, compiled, fetched, _ := sharedRun(t, y, "A")
		assert.Equal(t, want, got)
		assert.EqualValues(t, [2]int64{1, 0}, [2]int64{compiled, fetched})
	})
}

// TestProgramsFromDiskAreToldToTheJob: an engine that loads a program
// from the disk cache it shares with its node's other processes tells the
// job's exchange it has it, as one that compiled it after a failed fetch
// does, so that the exchange can free the published program once every
// process has it; one that publishes or fetches tells it nothing more.
func TestProgramsFromDiskAreToldToTheJob(t *testing.T) {
	dir := t.TempDir()
	x := newJobExchange()
	for _, tc := range []struct {
		name         string
		wantCompiled int64
		wantHad      int
	}{
		{"the first compiles and publishes", 1, 0},
		{"a rank of its node loads it from disk", 0, 1},
		{"another loads it from disk too", 0, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, compiled, _ := cacheRun(t, dir, "A", func(e *Engine) { e.ShareProgramsThrough(x) })
			assert.Equal(t, []float32{3, 5, 7}, got)
			assert.Equal(t, tc.wantCompiled, compiled)
			assert.Equal(t, tc.wantHad, x.hadCount())
		})
	}
	require.Len(t, x.published, 1)
	for name, n := range x.had {
		assert.Contains(t, x.published, name, "it tells the name it would have fetched")
		assert.Equal(t, 2, n)
	}
}
