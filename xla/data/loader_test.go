package data

import (
	"bytes"
	"context"
	"errors"
	"runtime/pprof"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/xlatest"
)

func testDevice(t *testing.T) *xla.Device { return xlatest.NewEngine(t, 1).Device(0) }

// counting is a dataset whose sample i has input [i, i] and label i%3; it
// fails on index failAt.
type counting struct {
	n, failAt int
}

func (c counting) Len() int { return c.n }
func (c counting) Get(i int) (Sample, error) {
	if i == c.failAt {
		return Sample{}, errors.New("disk read error")
	}
	return Sample{Input: []float32{float32(i), float32(i)}, Target: []float32{float32(i % 3)}}, nil
}
func (c counting) InputDims() []int       { return []int{2} }
func (c counting) TargetDims() []int      { return nil }
func (c counting) TargetDType() xla.DType { return xla.Int32 }

// epochInputs collects each batch's first input column.
func epochInputs(t *testing.T, l *Loader, epoch int) [][]float32 {
	var out [][]float32
	for b, err := range l.Epoch(context.Background(), epoch) {
		require.NoError(t, err)
		v, err := b.Input.Float32s(context.Background())
		require.NoError(t, err)
		col := make([]float32, b.Size)
		for i := range col {
			col[i] = v[2*i]
		}
		labels, err := xla.Values[int32](context.Background(), b.Target)
		require.NoError(t, err)
		require.Len(t, b.Samples, b.Size)
		for i, sample := range b.Samples {
			assert.Equal(t, float32(sample), col[i], "Samples names the batch's dataset indices")
		}
		for i, l := range labels {
			assert.Equal(t, int32(int(col[i])%3), l, "label travels with its sample")
		}
		out = append(out, col)
	}
	return out
}

func TestLoaderOrderShuffleDropLast(t *testing.T) {
	d := testDevice(t)
	ds := counting{n: 10, failAt: -1}
	seq, err := NewLoader(ds, d, LoaderConfig{BatchSize: 4})
	require.NoError(t, err)
	assert.Equal(t, [][]float32{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}}, epochInputs(t, seq, 0))
	assert.Equal(t, 3, seq.Stats().Batches)

	drop, err := NewLoader(ds, d, LoaderConfig{BatchSize: 4, DropLast: true})
	require.NoError(t, err)
	assert.Len(t, epochInputs(t, drop, 0), 2)
	assert.Equal(t, 2, drop.NumBatches(0))

	shuf, err := NewLoader(ds, d, LoaderConfig{BatchSize: 5, Shuffle: true, Seed: 11, Workers: 3, Prefetch: 1})
	require.NoError(t, err)
	e0, e0again, e1 := epochInputs(t, shuf, 0), epochInputs(t, shuf, 0), epochInputs(t, shuf, 1)
	assert.Equal(t, e0, e0again, "an epoch repeats for the same seed")
	assert.NotEqual(t, e0, e1, "epochs differ")
	all := slices.Concat(e0...)
	slices.Sort(all)
	assert.Equal(t, []float32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, all, "each sample once")
}

// loaderGoroutines counts goroutines running Loader code. (Counting all
// goroutines is not exact: Go runs buffer cleanups on goroutines of its own.)
func loaderGoroutines() int {
	var buf bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&buf, 1)
	return strings.Count(buf.String(), "xla/data.(*Loader)")
}

func TestLoaderErrorsAndEarlyStop(t *testing.T) {
	d := testDevice(t)
	failing, err := NewLoader(counting{n: 12, failAt: 6}, d, LoaderConfig{BatchSize: 4})
	require.NoError(t, err)
	var got error
	batches := 0
	for _, err := range failing.Epoch(context.Background(), 0) {
		if err != nil {
			got = err
			break
		}
		batches++
	}
	assert.Equal(t, 1, batches)
	assert.ErrorContains(t, got, "data: sample 6: disk read error")

	l, err := NewLoader(counting{n: 1000, failAt: -1}, d, LoaderConfig{BatchSize: 2})
	require.NoError(t, err)
	for range l.Epoch(context.Background(), 0) {
		break
	}
	assert.Eventually(t, func() bool { return loaderGoroutines() == 0 }, 2*time.Second, 10*time.Millisecond,
		"breaking out of an epoch stops its workers")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, err := range l.Epoch(ctx, 0) {
		if err != nil {
			got = err
			break
		}
	}
	assert.ErrorIs(t, got, context.Canceled)

	for _, tc := range []struct {
		cfg  LoaderConfig
		want string
	}{
		{LoaderConfig{BatchSize: 0}, "batch size 0: must be >= 1"},
		{LoaderConfig{BatchSize: 2, Workers: -1}, "workers -1 and prefetch 2 must be positive"},
	} {
		_, err := NewLoader(counting{n: 3}, d, tc.cfg)
		assert.ErrorContains(t, err, tc.want)
	}
	_, err = NewLoader(counting{n: 0}, d, LoaderConfig{BatchSize: 1})
	assert.ErrorContains(t, err, "the dataset is empty")
}

// slowCounting is counting whose Get takes a while and records how many
// calls are running, so a test sees goroutines that outlive their epoch.
type slowCounting struct {
	counting
	active, started *atomic.Int64
}

func (s slowCounting) Get(i int) (Sample, error) {
	s.started.Add(1)
	s.active.Add(1)
	defer s.active.Add(-1)
	time.Sleep(200 * time.Microsecond)
	return s.counting.Get(i)
}

// TestEpochEndsItsGoroutines leaves epochs early every way (break, a
// cancelled ctx, a failing sample) and closes the engine right after: no
// sample read or upload may still run when Epoch returns, and none may
// start later. Before the fix a Close after a break crashed the process
// about 1 run in 6 (SIGSEGV in an upload racing the client's destruction).
func TestEpochEndsItsGoroutines(t *testing.T) {
	ways := []struct {
		name string
		run  func(l *Loader)
	}{
		{"break", func(l *Loader) {
			for range l.Epoch(context.Background(), 0) {
				break
			}
		}},
		{"cancel", func(l *Loader) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			n := 0
			for _, err := range l.Epoch(ctx, 0) {
				if err != nil {
					return
				}
				if n++; n == 2 {
					cancel()
				}
			}
		}},
		{"failing sample", func(l *Loader) {
			for _, err := range l.Epoch(context.Background(), 0) {
				if err != nil {
					return
				}
			}
		}},
	}
	for _, way := range ways {
		t.Run(way.name, func(t *testing.T) {
			for round := range 20 {
				e := xlatest.NewEngine(t, 1)
				ds := slowCounting{counting: counting{n: 400, failAt: 9}, active: new(atomic.Int64), started: new(atomic.Int64)}
				if way.name != "failing sample" {
					ds.failAt = -1
				}
				l, err := NewLoader(ds, e.Device(0), LoaderConfig{BatchSize: 2, Workers: 4, Prefetch: 4})
				require.NoError(t, err)
				way.run(l)
				assert.Zero(t, ds.active.Load(), "round %d: sample reads still running after Epoch returned", round)
				started := ds.started.Load()
				require.NoError(t, e.Close())
				time.Sleep(time.Millisecond)
				assert.Equal(t, started, ds.started.Load(), "round %d: a sample read started after Epoch returned", round)
			}
		})
	}
}

// TestLoaderAfterClose: an epoch on a closed engine yields the closed
// error once, naming the backend, instead of crashing in an upload.
func TestLoaderAfterClose(t *testing.T) {
	e := xlatest.NewEngine(t, 1)
	l, err := NewLoader(counting{n: 10, failAt: -1}, e.Device(0), LoaderConfig{BatchSize: 2})
	require.NoError(t, err)
	require.NoError(t, e.Close())
	var errs []error
	for _, err := range l.Epoch(context.Background(), 0) {
		require.Error(t, err)
		errs = append(errs, err)
	}
	require.Len(t, errs, 1)
	assert.ErrorIs(t, errs[0], backend.ErrClosed)
}

// TestLoaderOverlapsTheStep: while the consumer works on a batch (a
// training step), the workers assemble and upload the next ones, so the
// consumer's wait is a small part of the workers' time, which Stats
// reports apart.
func TestLoaderOverlapsTheStep(t *testing.T) {
	e := xlatest.NewEngine(t, 1)
	ds := slowCounting{counting: counting{n: 200, failAt: -1}, active: new(atomic.Int64), started: new(atomic.Int64)}
	l, err := NewLoader(ds, e.Device(0), LoaderConfig{BatchSize: 10}) // ≥ 2 ms a batch
	require.NoError(t, err)
	for _, err := range l.Epoch(t.Context(), 0) {
		require.NoError(t, err)
		time.Sleep(4 * time.Millisecond) // the step
	}
	st := l.Stats()
	require.Equal(t, 20, st.Batches)
	assert.GreaterOrEqual(t, st.Assemble, 20*10*200*time.Microsecond, "every sample read is in Assemble")
	assert.Less(t, st.Wait, st.Assemble/2, "the consumer waited %v of the workers' %v", st.Wait, st.Assemble)
	assert.GreaterOrEqual(t, st.Elapsed, 20*4*time.Millisecond)
}
